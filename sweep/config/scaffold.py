"""`ckpt-sweep new-family NAME`: a complete, commented builder for your own model, to edit."""

from __future__ import annotations

import keyword
from pathlib import Path

TEMPLATE = '''"""A ckpt-sweep family of your own: {name}. Written by `ckpt-sweep new-family {name}`; edit freely.

From this folder (it is importable, no PYTHONPATH needed):
    ckpt-sweep run sweep=none family._target_={name}.build family.name={name} mode=none,layer,unsloth
    ckpt-sweep run sweep=none family._target_={name}.build family.name={name} preset=large predict=true card_gib=24

What the harness asks of this module: `build(...)` returning a ckptlib.Workload; optionally PRESETS
(validated before any cell runs; the first is the default unless DEFAULT_PRESET names one) and
describe_shape (what the reports call the cell's tokens and batch).
"""

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ckptlib import BlockSpec, Workload
from ckptlib.workload import adamw_for, default_dtype, make_trainable, random_normal


@dataclass(frozen=True)
class Shape:
    width: int
    heads: int
    depth: int
    tokens: int
    batch: int = 1


# Presets by name: a small one that runs on a CPU in seconds, and the size you train.
PRESETS = {{
    "small": Shape(width=128, heads=4, depth=4, tokens=256),
    "large": Shape(width=2048, heads=16, depth=24, tokens=4096),
}}

# Where the blocks are (a list checkpointing can group), and which submodule of a block is the
# attention and which the feed-forward (the torch-ffn / unsloth-ffn and attention-offload modes).
# A block list whose blocks return something other than their first argument needs a
# CallConvention (see ckptlib/spec.py: CallConvention.state for keyword loops, .leading for tuples).
SPEC = BlockSpec(block_lists=["blocks"], attention=["attn"], feed_forward=["ff"], name="{name}")
LORA_TARGETS = ["attn.qkv", "attn.out"]  # Linear layers the LoRA adapters wrap (training=lora)


class Attention(nn.Module):
    def __init__(self, shape: Shape, **factory):
        super().__init__()
        self.heads = shape.heads
        self.qkv = nn.Linear(shape.width, 3 * shape.width, **factory)
        self.out = nn.Linear(shape.width, shape.width, **factory)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        return self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, shape: Shape, **factory):
        super().__init__()
        self.norm1 = nn.LayerNorm(shape.width, **factory)
        self.attn = Attention(shape, **factory)
        self.norm2 = nn.LayerNorm(shape.width, **factory)
        self.ff = nn.Sequential(nn.Linear(shape.width, 4 * shape.width, **factory), nn.GELU(),
                                nn.Linear(4 * shape.width, shape.width, **factory))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class Model(nn.Module):
    def __init__(self, shape: Shape, **factory):
        super().__init__()
        self.blocks = nn.ModuleList(Block(shape, **factory) for _ in range(shape.depth))

    def forward(self, x):
        for block in self.blocks:  # x = block(x): the default call convention
            x = block(x)
        return x


def resolve_shape(preset: str, **overrides) -> Shape:
    """A preset's shape with the sweep's overrides (+shape.tokens=2048 on the command line)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {{preset!r}}; valid presets: {{', '.join(PRESETS)}}")
    return replace(PRESETS[preset], **overrides)


def describe_shape(preset: str, **overrides) -> dict:
    shape = resolve_shape(preset, **overrides)
    return {{"tokens": shape.tokens, "batch": shape.batch}}


def build(preset: str = "small", training: str = "lora", device: str = "cpu", lora_rank: int = 16, seed: int = 0,
          dtype: torch.dtype | None = None, quantization: str = "none", **shape) -> Workload:
    """One training step's worth of model, inputs and optimizer. The harness passes every keyword
    above (device "meta" when it checks the builder or predicts memory: allocate nothing real)."""
    shape = resolve_shape(preset, **shape)
    dtype = dtype or default_dtype(device)  # bf16 on GPUs, fp32 on CPUs
    torch.manual_seed(seed)
    model = Model(shape, device=device, dtype=dtype)
    model = make_trainable(model, training, LORA_TARGETS, lora_rank, quantization)  # lora | frozen | full
    model.train()
    x = random_normal((shape.batch, shape.tokens, shape.width), device, dtype, requires_grad=training == "frozen")
    target = random_normal(x.shape, device, dtype)  # torch.randn, without its cost on meta
    return Workload(model=model, spec=SPEC, args=(x,), target=target, optimizer=adamw_for(model),
                    grad_inputs=(x,) if training == "frozen" else ())
'''


def new_family(name: str, folder: Path) -> Path:
    """Write `<folder>/<name>.py`; ValueError when the name is no module name or the file exists."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{name!r} is not a Python module name (letters, digits and _; e.g. my_model)")
    from ckptlib.families import all_families

    built_in = ["synthetic", *all_families()]
    if name.replace("_", "-") in built_in or name in built_in:
        raise ValueError(f"{name!r} is a built-in family's name; give your own model another (e.g. my_{name})")
    path = folder / f"{name}.py"
    if path.exists():
        raise ValueError(f"{path} exists already; not overwritten")
    path.write_text(TEMPLATE.format(name=name))
    return path
