"""Host buffers for offloaded activations, pooled by (numel, dtype, layout).

Pinned allocation costs milliseconds per tensor, so buffers are kept and reused. At most
`max_buckets` distinct keys are held; a new key evicts the least recently used idle bucket, or,
when every bucket is busy, is served by a one-off pageable buffer. When pinning fails (a host cap
on pinned memory) the pool carries on with pageable buffers and warns once: pageable copies make
the host wait at every offload. The pool never grows past `limit_bytes` (a share of the host's
available memory): `acquire` answers None and the caller keeps the tensor where it is.
"""

from __future__ import annotations

import warnings
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
    refused_over_limit: int = 0  # requests that would have grown the pool past its host-memory limit
    held_bytes: int = 0  # bytes in pooled buffers now, pinned or not
    pinned_bytes: int = 0
    peak_held_bytes: int = 0
    peak_pinned_bytes: int = 0

    def reset_step(self) -> None:
        self.hits = self.misses = self.evictions = self.pageable_fallbacks = self.pin_failures = 0
        self.refused_over_limit = 0
        self.peak_held_bytes, self.peak_pinned_bytes = self.held_bytes, self.pinned_bytes

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(eq=False)
class HostBuffer:
    tensor: torch.Tensor  # 1-D, numel elements
    key: tuple[int, torch.dtype, torch.layout] | None  # None: one-off pageable buffer, not pooled
    ready: object = None  # event the next writer must wait for (a reload still reading it)


@dataclass
class _Bucket:
    free: list[HostBuffer] = field(default_factory=list)
    in_use: int = 0


class HostPool:
    def __init__(self, max_buckets: int, pin: bool, limit_bytes: int | None = None, device: str = "cpu"):
        if max_buckets < 0:
            raise ValueError(f"max_buckets must be 0 or more, got {max_buckets}")
        self.max_buckets = max_buckets
        self.pin = self._wants_pin = pin
        self.limit_bytes = limit_bytes
        self.device = device  # "meta" for a model on the meta device (a prediction): nothing is allocated
        self.stats = PoolStats()
        self._buckets: OrderedDict[tuple[int, torch.dtype, torch.layout], _Bucket] = OrderedDict()
        self._one_off_bytes = 0  # one-off pageable buffers still in use
        self._warned = False

    def acquire(self, numel: int, dtype: torch.dtype, layout: torch.layout = torch.strided) -> HostBuffer | None:
        """A host buffer of `numel` elements, or None when a new one would pass the limit."""
        key = (numel, dtype, layout)
        bucket = self._buckets.get(key)
        if bucket is not None and bucket.free:
            self._buckets.move_to_end(key)
            bucket.in_use += 1
            self.stats.hits += 1
            return bucket.free.pop()
        nbytes = numel * dtype.itemsize
        if self.limit_bytes is not None and self.stats.held_bytes + self._one_off_bytes + nbytes > self.limit_bytes:
            self.stats.refused_over_limit += 1
            return None
        if bucket is None:
            bucket = self._new_bucket(key)
            if bucket is None:
                self.stats.pageable_fallbacks += 1
                self._warn_pageable("every pooled bucket is busy")
                self._one_off_bytes += nbytes
                return HostBuffer(self._allocate(numel, dtype, pin=False), key=None)
        self._buckets.move_to_end(key)
        bucket.in_use += 1
        self.stats.misses += 1
        tensor = self._allocate(numel, dtype, pin=self.pin)
        self._account(tensor, +1)
        return HostBuffer(tensor, key=key)

    def release(self, buffer: HostBuffer, ready: object = None) -> None:
        if buffer.key is None:
            self._one_off_bytes -= buffer.tensor.numel() * buffer.tensor.element_size()
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
                    return torch.empty(numel, dtype=dtype, device=self.device, pin_memory=True)
                except RuntimeError as error:
                    self.stats.pin_failures += 1
                    self.pin = False
                    self._warn_pageable(f"pinning failed ({str(error).splitlines()[0]})")
            return torch.empty(numel, dtype=dtype, device=self.device)

    def _warn_pageable(self, why: str) -> None:
        if self._wants_pin and not self._warned:  # a CPU model's buffers are pageable by design
            self._warned = True
            warnings.warn(
                f"activation offload: pageable host buffers ({why}); each copy makes the host wait "
                "(raise pin_memory_max_buckets or the host's pinned-memory limit)",
                stacklevel=4,
            )

    def _account(self, tensor: torch.Tensor, sign: int) -> None:
        nbytes = sign * tensor.numel() * tensor.element_size()
        self.stats.held_bytes += nbytes
        self.stats.peak_held_bytes = max(self.stats.peak_held_bytes, self.stats.held_bytes)
        if tensor.is_pinned():
            self.stats.pinned_bytes += nbytes
            self.stats.peak_pinned_bytes = max(self.stats.peak_pinned_bytes, self.stats.pinned_bytes)
