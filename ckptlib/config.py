"""What a user asks for: the checkpointing configuration, validated on construction."""

from __future__ import annotations

import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    """What a backend does, under the name the docs give it.

    recompute: what backward recomputes, "block" (a whole region of blocks), "ffn" (only the
    feed-forward submodules) or None (nothing: every activation is kept).
    offload_inputs: the recomputed regions' saved inputs wait in host memory instead of on the device.
    """

    name: str
    recompute: str | None
    offload_inputs: bool = False


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("none", recompute=None),
        Backend("torch", recompute="block"),
        Backend("torch-ffn", recompute="ffn"),
        Backend("unsloth", recompute="block", offload_inputs=True),
        Backend("unsloth-ffn", recompute="ffn", offload_inputs=True),
    )
}
DEFAULT_PIN_MEMORY_MAX_BUCKETS = 12
# Saved tensors smaller than this cost more to move than they save (Unsloth uses 2 MB, TE about 1 MB).
DEFAULT_MIN_OFFLOAD_BYTES = 1 << 20
# Device-to-host copies in flight before the oldest is waited on (torchtune's max_fwd_stash_size is 5):
# SDPA saves q, k, v and out back to back, so a depth of 4 lets a whole attention's copies overlap.
DEFAULT_OFFLOAD_STASH_DEPTH = 4
# What an interval groups (SimpleTuner has both, per family: gradient_checkpointing_interval.py):
# "segments": `interval` consecutive blocks form one region, a region every `stride` blocks
# (checkpoint_sequential_state); "blocks": the blocks the pattern picks, every `interval`-th, or with
# a stride the first `interval` of every `stride`, each its own region (should_checkpoint_block);
# "each": every block its own region, the interval ignored (SimpleTuner's FFN-only loop in some
# families). Each in the words the planner and the plan verb use, for an interval of n:
REGION_MEANINGS = {
    "segments": "segments of {n} blocks",
    "blocks": "one block in {n}, alone",
    "each": "every block alone, whatever the interval",
}
REGIONS = tuple(REGION_MEANINGS)
# What an FFN-only backend recomputes in a block (SimpleTuner's copies of each family's blocks differ):
# "modules": the block's feed-forward submodules (BlockSpec.feed_forward) and nothing else; "side":
# the block's feed-forward side as the family's trainer checkpoints it (BlockSpec.ffn_sides: Flux's
# norm, modulation, MLP, gate and residual; its single blocks' MLP path), the modules where a block
# declares no side.
FFN_SCOPES = ("modules", "side")
# What attention offload's saved-tensor hooks wrap (SimpleTuner's copies differ per family): "module":
# the declared attention submodules' whole forward (projections, norms, rotary, kernel); "kernel": only
# the scaled-dot-product-attention calls inside them (Kandinsky 5: around dispatch_attention_fn);
# "module-and-cross": as "module", the attentions between a block's streams too (BlockSpec.cross_attention:
# LTX-2's audio-to-video and video-to-audio attentions).
ATTENTION_OFFLOAD_SCOPES = ("module", "kernel", "module-and-cross")
# The pool stops growing past this share of the host's available memory (torchtune warns at 60%).
DEFAULT_HOST_MEMORY_SHARE = 0.6


@dataclass(frozen=True)
class CheckpointConfig:
    """One checkpointing mode.

    backend: none | torch | torch-ffn | unsloth | unsloth-ffn.
    interval: blocks per checkpointed region (None or 1: every block on its own).
    stride: distance between region starts; blocks in between run plain. Must be >= interval.
    blocks: which blocks the schedule may checkpoint, counted 0, 1, ... through the block lists in
        the spec's order (Flux: its 19 double blocks, then its 38 single blocks): an int k for the first
        k blocks (Megatron's "block" method), a tuple for an explicit set; None: every block. The
        others run plain. Regions are the interval/stride pattern's, cut to the chosen blocks.
    offload_attention: move attention-side saved tensors to host memory.
    pin_memory_max_buckets: distinct (numel, dtype) pinned buffers the host pool may keep; 0 = pageable only.
    min_offload_bytes: saved tensors below this size stay on the device.
    offload_stash_depth: device-to-host copies kept in flight; the oldest is waited on only beyond it.
    offload_prefetch: in backward, reload the next region's tensors on a side stream while this one
        is recomputed (CUDA; a CPU copies synchronously either way).
    host_memory_share: the host pool stops growing past this share of available host memory; what
        does not fit stays on the device for the rest of the step (reported).
    regions: what the interval groups (REGIONS): "segments" of consecutive blocks, or "blocks" each
        checkpointed alone, the interval then picking which (SimpleTuner's per-block meaning), or
        "each": every block alone, the interval ignored (SimpleTuner's FFN-only loop in some families).
    offload_attention_in_regions: offload attention inside recomputed regions too, as SimpleTuner's
        gradient_checkpointing_offload_attention does (NOTE [ Attention offload inside a region ] in
        ckptlib/wiring.py); without it attention is offloaded only in blocks that keep their activations.
    ffn_scope: what an FFN-only backend recomputes in a block (FFN_SCOPES).
    attention_offload_scope: what attention offload wraps (ATTENTION_OFFLOAD_SCOPES).
    """

    backend: str = "none"
    interval: int | None = None
    stride: int | None = None
    blocks: int | tuple[int, ...] | None = None
    offload_attention: bool = False
    pin_memory_max_buckets: int = DEFAULT_PIN_MEMORY_MAX_BUCKETS
    min_offload_bytes: int = DEFAULT_MIN_OFFLOAD_BYTES
    offload_stash_depth: int = DEFAULT_OFFLOAD_STASH_DEPTH
    offload_prefetch: bool = True
    host_memory_share: float = DEFAULT_HOST_MEMORY_SHARE
    regions: str = "segments"  # last: configs written positionally keep their meaning
    offload_attention_in_regions: bool = False
    ffn_scope: str = "modules"
    attention_offload_scope: str = "module"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown checkpointing backend {self.backend!r}; valid backends: {', '.join(BACKENDS)}")
        if self.interval is not None and self.interval < 1:
            raise ValueError(f"checkpointing interval must be a positive number of blocks, got {self.interval}")
        if self.stride is not None:
            if self.interval is None:
                warnings.warn(f"segment stride {self.stride} is ignored without a checkpointing interval", stacklevel=3)
                object.__setattr__(self, "stride", None)
            elif self.stride < self.interval:
                raise ValueError(
                    "segment stride must be at least the checkpointing interval "
                    f"(stride {self.stride} < interval {self.interval})"
                )
        if self.offload_attention_in_regions and not self.offload_attention:
            raise ValueError("offload_attention_in_regions needs offload_attention")
        if self.regions not in REGIONS:
            raise ValueError(f"unknown regions {self.regions!r}; valid: {', '.join(REGIONS)}")
        if self.ffn_scope not in FFN_SCOPES:
            raise ValueError(f"unknown ffn_scope {self.ffn_scope!r}; valid: {', '.join(FFN_SCOPES)}")
        if self.attention_offload_scope not in ATTENTION_OFFLOAD_SCOPES:
            valid = ", ".join(ATTENTION_OFFLOAD_SCOPES)
            raise ValueError(f"unknown attention_offload_scope {self.attention_offload_scope!r}; valid: {valid}")
        self._check_blocks()
        if self.pin_memory_max_buckets < 0:
            raise ValueError(f"pin_memory_max_buckets must be 0 or more, got {self.pin_memory_max_buckets}")
        if self.min_offload_bytes < 0:
            raise ValueError(f"min_offload_bytes must be 0 or more, got {self.min_offload_bytes}")
        if self.offload_stash_depth < 1:
            raise ValueError(f"offload_stash_depth must be 1 or more copies in flight, got {self.offload_stash_depth}")
        if not 0 < self.host_memory_share <= 1:
            raise ValueError(f"host_memory_share must be in (0, 1], got {self.host_memory_share}")

    def _check_blocks(self) -> None:
        if self.blocks is None:
            return
        if isinstance(self.blocks, bool) or not isinstance(self.blocks, (int, tuple, list)):
            raise ValueError(f"blocks must be a block count or a tuple of block indices, got {self.blocks!r}")
        if isinstance(self.blocks, int):
            if self.blocks < 0:
                raise ValueError(f"blocks (the first k blocks) must be 0 or more, got {self.blocks}")
            return
        indices = tuple(self.blocks)
        if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in indices):
            raise ValueError(f"blocks must be block indices 0 or more, got {self.blocks!r}")
        if len(set(indices)) != len(indices):
            raise ValueError(f"blocks lists a block twice: {self.blocks!r}")
        object.__setattr__(self, "blocks", tuple(sorted(indices)))

    def chosen(self, total_blocks: int) -> frozenset[int]:
        """The blocks (indices through every list) the schedule may checkpoint, of a model with
        `total_blocks`; an explicit index past the last block is an error, not ignored."""
        if self.blocks is None:
            return frozenset(range(total_blocks))
        if isinstance(self.blocks, int):
            return frozenset(range(min(self.blocks, total_blocks)))
        beyond = [i for i in self.blocks if i >= total_blocks]
        if beyond:
            last = total_blocks - 1
            raise ValueError(f"blocks {beyond} do not exist: the model has {total_blocks} blocks (0-{last})")
        return frozenset(self.blocks)

    @property
    def checkpoints(self) -> bool:
        return BACKENDS[self.backend].recompute is not None

    @property
    def ffn_only(self) -> bool:
        return BACKENDS[self.backend].recompute == "ffn"

    @property
    def offloads_regions(self) -> bool:
        return BACKENDS[self.backend].offload_inputs

    @property
    def uses_offload(self) -> bool:
        return self.offloads_regions or self.offload_attention
