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


@dataclass(frozen=True)
class CheckpointConfig:
    """One checkpointing mode.

    backend: none | torch | torch-ffn | unsloth | unsloth-ffn.
    interval: blocks per checkpointed region (None or 1: every block on its own).
    stride: distance between region starts; blocks in between run plain. Must be >= interval.
    offload_attention: move attention-side saved tensors to host memory.
    pin_memory_max_buckets: distinct (numel, dtype) pinned buffers the host pool may keep; 0 = pageable only.
    min_offload_bytes: saved tensors below this size stay on the device.
    """

    backend: str = "none"
    interval: int | None = None
    stride: int | None = None
    offload_attention: bool = False
    pin_memory_max_buckets: int = DEFAULT_PIN_MEMORY_MAX_BUCKETS
    min_offload_bytes: int = DEFAULT_MIN_OFFLOAD_BYTES

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
        if self.pin_memory_max_buckets < 0:
            raise ValueError(f"pin_memory_max_buckets must be 0 or more, got {self.pin_memory_max_buckets}")
        if self.min_offload_bytes < 0:
            raise ValueError(f"min_offload_bytes must be 0 or more, got {self.min_offload_bytes}")

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
