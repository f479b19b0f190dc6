"""What a user asks for: the checkpointing configuration, validated on construction."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

BACKENDS = ("none", "torch", "torch-ffn", "unsloth", "unsloth-ffn")
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
                warnings.warn(
                    f"segment stride {self.stride} is ignored without a checkpointing interval", stacklevel=3
                )
                object.__setattr__(self, "stride", None)
            elif self.stride < self.interval:
                raise ValueError(
                    f"segment stride must be at least the checkpointing interval (stride {self.stride} < interval {self.interval})"
                )
        if self.pin_memory_max_buckets < 0:
            raise ValueError(f"pin_memory_max_buckets must be 0 or more, got {self.pin_memory_max_buckets}")
        if self.min_offload_bytes < 0:
            raise ValueError(f"min_offload_bytes must be 0 or more, got {self.min_offload_bytes}")

    @property
    def checkpoints(self) -> bool:
        return self.backend != "none"

    @property
    def ffn_only(self) -> bool:
        return self.backend.endswith("-ffn")

    @property
    def offloads_regions(self) -> bool:
        return self.backend.startswith("unsloth")

    @property
    def uses_offload(self) -> bool:
        return self.offloads_regions or self.offload_attention
