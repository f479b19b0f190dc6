"""The docs' synthetic transformer: pre-norm attention (qkv, SDPA, out) plus a GELU feed-forward.

Its shapes, presets and spec import no torch (a sweep's own process reads them); the modules live
in `ckptlib.synthetic.model`, imported when a workload is built."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..spec import BlockSpec

if TYPE_CHECKING:
    import torch

    from ..workload import Workload


@dataclass(frozen=True)
class SyntheticShape:
    width: int
    heads: int
    depth: int
    tokens: int
    batch: int = 1
    mlp_ratio: int = 4
    dropout: float = 0.0
    ffn_norm: bool = False  # the pre-FFN norm inside the feed-forward region (the docs' block)


# NOTE [ The docs' synthetic block ]: the docs give tokens for the packed-latents sweep, and for the
# larger shape "32 layers, width 4096, 3072 tokens", but the published peaks say otherwise. Every
# packed peak is a weight intercept plus 1 MiB per token under `none` and 0.2 MiB under `layer`:
# the intercept, about 3.43 GiB, is 16 blocks of width 3072 in bf16 (12 d^2 weights a block), and
# the larger shape's peaks and step times (2.00-2.08x packed-4096's, every mode, both GPUs) are 32
# of the same blocks at 4096 tokens: the same T x d as the heading's, half its weight mass. The
# docs' FFN checkpoint also covers the pre-FFN norm (with the MLP alone, one hidden state a layer
# more stays saved: 0.75 GiB on the larger shape). So the docs-* presets are width 3072, 24 heads,
# 16 (or 32) blocks, the norm inside the FFN region; predicted with the docs' offloader settings
# (conf/sweep/packed-latents.yaml) they give every published H100 peak within 0.07 GiB
# (scripts/check_published.py, reports/published.md). The packed-* and large-3072 presets are the
# shapes this project first guessed (12 blocks; width 4096), kept so recorded cells keep their meaning.
PRESETS: dict[str, SyntheticShape] = {
    "docs-packed-1024": SyntheticShape(width=3072, heads=24, depth=16, tokens=1024, ffn_norm=True),
    "docs-packed-4096": SyntheticShape(width=3072, heads=24, depth=16, tokens=4096, ffn_norm=True),
    "docs-packed-16384": SyntheticShape(width=3072, heads=24, depth=16, tokens=16384, ffn_norm=True),
    "docs-large": SyntheticShape(width=3072, heads=24, depth=32, tokens=4096, ffn_norm=True),
    "packed-1024": SyntheticShape(width=3072, heads=24, depth=12, tokens=1024),
    "packed-4096": SyntheticShape(width=3072, heads=24, depth=12, tokens=4096),
    "packed-16384": SyntheticShape(width=3072, heads=24, depth=12, tokens=16384),
    "large-3072": SyntheticShape(width=4096, heads=32, depth=32, tokens=3072),
    # Scaled down for 2-core CPUs: the same sweep in seconds per cell.
    "cpu-256": SyntheticShape(width=256, heads=4, depth=8, tokens=256),
    "cpu-1024": SyntheticShape(width=256, heads=4, depth=8, tokens=1024),
    "cpu-large": SyntheticShape(width=384, heads=6, depth=16, tokens=384),
    # Tests.
    "tiny": SyntheticShape(width=64, heads=4, depth=8, tokens=32, batch=2, dropout=0.1),
    "tiny-odd": SyntheticShape(width=64, heads=4, depth=7, tokens=32, batch=2, dropout=0.1),
    "tiny-docs": SyntheticShape(width=64, heads=4, depth=8, tokens=32, batch=2, dropout=0.1, ffn_norm=True),
    # cpu-256's layers (wide enough that an int8 base is about half the bf16 one, scales included) at
    # 16 tokens: a bf16 step in a fifteenth of cpu-256's time on a CPU without bf16 matmul units
    "tiny-wide": SyntheticShape(width=256, heads=4, depth=8, tokens=16),
}

DEFAULT_PRESET = "cpu-256"  # what `ckpt-sweep run` measures when no preset is named: seconds on a CPU
SPEC = BlockSpec(block_lists=["blocks"], attention=["attn"], feed_forward=["ff"], name="synthetic")
LORA_TARGETS = ["qkv", "out"]


def resolve_shape(preset: str | SyntheticShape, **overrides) -> SyntheticShape:
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise ValueError(f"unknown synthetic preset {preset!r}; valid presets: {', '.join(PRESETS)}")
        preset = PRESETS[preset]
    return replace(preset, **{k: v for k, v in overrides.items() if v is not None})


def describe_shape(preset: str | SyntheticShape, **overrides) -> dict:
    """The shape as the sweep records it: the block's sequence tokens and the batch (of sequences)."""
    shape = resolve_shape(preset, **overrides)
    return {"tokens": shape.tokens, "batch": shape.batch, "samples_per_step": shape.batch, "sample_unit": "sequences"}


def build(
    preset: str | SyntheticShape = "tiny",
    training: str = "lora",
    device: str = "cpu",
    lora_rank: int = 16,
    seed: int = 0,
    dtype: torch.dtype | None = None,
    quantization: str = "none",
    **shape_overrides,
) -> Workload:
    """The synthetic family's training step: frozen base + LoRA on qkv/out (`lora`), input-only
    gradients (`frozen`) or every weight with AdamW (`full`); the base optionally quantized."""
    import torch

    from ..workload import Workload, adamw_for, default_dtype, make_trainable, random_normal
    from .model import SyntheticTransformer

    shape = resolve_shape(preset, **shape_overrides)
    dtype = dtype or default_dtype(device)
    torch.manual_seed(seed)
    model = SyntheticTransformer(shape, device=device, dtype=dtype)
    model = make_trainable(model, training, LORA_TARGETS, lora_rank, quantization)
    model.train()
    x = random_normal((shape.batch, shape.tokens, shape.width), device, dtype, requires_grad=training == "frozen")
    target = random_normal(x.shape, device, dtype)
    return Workload(
        model=model,
        spec=SPEC,
        args=(x,),
        target=target,
        optimizer=adamw_for(model),
        grad_inputs=(x,) if training == "frozen" else (),
    )
