"""The docs' checkpointing modes by their column names, in the docs' order (the family tables'):
each a CheckpointConfig. Harnesses and configs take their mode presets from here."""

from __future__ import annotations

from dataclasses import replace

from .config import CheckpointConfig

MODES: dict[str, CheckpointConfig] = {
    "none": CheckpointConfig("none"),
    # SimpleTuner's attention offload, inside recomputed blocks too (NOTE [ Attention offload inside
    # a region ] in ckptlib/wiring.py)
    "activation-offload": CheckpointConfig("torch", offload_attention=True, offload_attention_in_regions=True),
    "layer": CheckpointConfig("torch"),
    "interval2": CheckpointConfig("torch", interval=2),
    "seg2-stride4": CheckpointConfig("torch", interval=2, stride=4),
    "seg2-stride4-offload": CheckpointConfig(
        "torch", interval=2, stride=4, offload_attention=True, offload_attention_in_regions=True
    ),
    # The project's attention offload: only where a block keeps its activations (a recomputed block
    # keeps no attention tensors to move), so no more device memory than seg2-stride4's
    "seg2-stride4-offload-plain": CheckpointConfig("torch", interval=2, stride=4, offload_attention=True),
    "unsloth": CheckpointConfig("unsloth"),
    "torch-ffn": CheckpointConfig("torch-ffn"),
    # FFN-only recompute leaves attention's saved tensors in place: offloading them pays here.
    "torch-ffn-offload": CheckpointConfig("torch-ffn", offload_attention=True),
    "unsloth-ffn": CheckpointConfig("unsloth-ffn"),
}

# The synthetic sweep's columns (the docs' Unsloth page), in the docs' order.
SYNTHETIC_MODES = ("none", "torch-ffn", "unsloth-ffn", "layer", "unsloth")
# Every mode in the order tables list them: the synthetic sweep's first, then the family tables'.
MODE_ORDER = tuple(dict.fromkeys([*SYNTHETIC_MODES, *MODES]))


def mode_rank(mode: str) -> int:
    """Where a mode goes in a table (modes of one's own last)."""
    return MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER)


def as_wired(config: CheckpointConfig, interval_regions: str) -> CheckpointConfig:
    """A mode as a trainer wires it for one family: an interval of whole blocks groups what the
    family's `interval_regions` says (ckptlib.families.Family); anything else is unchanged."""
    grouped = config.checkpoints and not config.ffn_only and (config.interval or 1) > 1
    return replace(config, regions=interval_regions) if grouped else config
