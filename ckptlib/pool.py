"""Host buffers for offloaded activations, pooled by (numel, dtype).

Pinned allocation costs milliseconds per tensor, so buffers are kept and reused. At most
`max_buckets` distinct (numel, dtype) keys are held; a new key evicts the least recently used idle
bucket, or, when every bucket is busy, is served by a one-off pageable buffer. When pinning fails
(no accelerator, or a host cap on pinned memory) the pool carries on with pageable buffers.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, fields

import torch

from .memory import untracked


@dataclass
class PoolStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    pageable_fallbacks: int = 0  # requests served outside the pool
    pin_failures: int = 0
    held_bytes: int = 0  # bytes in pooled buffers now, pinned or not
    pinned_bytes: int = 0
    peak_held_bytes: int = 0
    peak_pinned_bytes: int = 0

    def reset_step(self) -> None:
        self.hits = self.misses = self.evictions = self.pageable_fallbacks = self.pin_failures = 0
        self.peak_held_bytes, self.peak_pinned_bytes = self.held_bytes, self.pinned_bytes

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(eq=False)
class HostBuffer:
    tensor: torch.Tensor  # 1-D, numel elements
    key: tuple[int, torch.dtype] | None  # None: one-off pageable buffer, not pooled
    ready: object = None  # event the next writer must wait for (a reload still reading it)


@dataclass
class _Bucket:
    free: list[HostBuffer] = field(default_factory=list)
    in_use: int = 0


class HostPool:
    def __init__(self, max_buckets: int, pin: bool):
        if max_buckets < 0:
            raise ValueError(f"max_buckets must be 0 or more, got {max_buckets}")
        self.max_buckets = max_buckets
        self.pin = pin
        self.stats = PoolStats()
        self._buckets: OrderedDict[tuple[int, torch.dtype], _Bucket] = OrderedDict()

    def acquire(self, numel: int, dtype: torch.dtype) -> HostBuffer:
        key = (numel, dtype)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._new_bucket(key)
            if bucket is None:
                self.stats.pageable_fallbacks += 1
                return HostBuffer(self._allocate(numel, dtype, pin=False), key=None)
        self._buckets.move_to_end(key)
        bucket.in_use += 1
        if bucket.free:
            self.stats.hits += 1
            return bucket.free.pop()
        self.stats.misses += 1
        tensor = self._allocate(numel, dtype, pin=self.pin)
        self._account(tensor, +1)
        return HostBuffer(tensor, key=key)

    def release(self, buffer: HostBuffer, ready: object = None) -> None:
        if buffer.key is None:
            return
        buffer.ready = ready
        bucket = self._buckets.get(buffer.key)
        if bucket is None:  # evicted while in use cannot happen: only idle buckets are evicted
            raise RuntimeError(f"released a buffer of unknown bucket {buffer.key}")
        bucket.in_use -= 1
        bucket.free.append(buffer)

    def clear(self) -> None:
        for key in [k for k, b in self._buckets.items() if b.in_use == 0]:
            self._drop(key)

    @property
    def num_buckets(self) -> int:
        return len(self._buckets)

    def _new_bucket(self, key) -> _Bucket | None:
        if self.max_buckets == 0:
            return None
        if len(self._buckets) >= self.max_buckets:
            idle = next((k for k, b in self._buckets.items() if b.in_use == 0), None)  # least recently used first
            if idle is None:
                return None
            self._drop(idle)
            self.stats.evictions += 1
        bucket = self._buckets[key] = _Bucket()
        return bucket

    def _drop(self, key) -> None:
        for buffer in self._buckets.pop(key).free:
            self._account(buffer.tensor, -1)

    def _allocate(self, numel: int, dtype: torch.dtype, pin: bool) -> torch.Tensor:
        with untracked():
            if pin:
                try:
                    return torch.empty(numel, dtype=dtype, pin_memory=True)
                except RuntimeError:
                    self.stats.pin_failures += 1
                    self.pin = False
            return torch.empty(numel, dtype=dtype)

    def _account(self, tensor: torch.Tensor, sign: int) -> None:
        nbytes = sign * tensor.numel() * tensor.element_size()
        self.stats.held_bytes += nbytes
        self.stats.peak_held_bytes = max(self.stats.peak_held_bytes, self.stats.held_bytes)
        if tensor.is_pinned():
            self.stats.pinned_bytes += nbytes
            self.stats.peak_pinned_bytes = max(self.stats.peak_pinned_bytes, self.stats.pinned_bytes)
