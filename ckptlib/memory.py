"""Peak live tensor bytes of one device, for CPU runs where there is no allocator peak counter.

A TorchDispatchMode sees every tensor an op returns; a finalizer on each new storage subtracts its
bytes when the storage dies (what torch.distributed._tools.mem_tracker does, without its
one-iteration-per-module restriction).
"""
from __future__ import annotations

import contextlib
import threading
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_untracked = threading.local()


@contextlib.contextmanager
def untracked():
    """Allocations in this block are not the compute device's (the offload pool's host buffers)."""
    previous = getattr(_untracked, "active", False)
    _untracked.active = True
    try:
        yield
    finally:
        _untracked.active = previous


class LiveTensorTracker(TorchDispatchMode):
    """Tracks bytes of live storages on `device` created while active, and their peak.

    Storages that existed before entering (parameters, inputs) are not counted; add them with `track`.
    """

    def __init__(self, device: str | torch.device = "cpu"):
        super().__init__()
        self.device = torch.device(device)
        self.live_bytes = 0
        self.peak_bytes = 0
        self._sizes: dict[int, int] = {}

    def reset_peak(self) -> None:
        self.peak_bytes = self.live_bytes

    def track(self, *tensors: torch.Tensor) -> None:
        for t in tensors:
            self._register(t)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not getattr(_untracked, "active", False):
            # Views and in-place results share an input's storage: only new storages are allocations.
            inputs = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.untyped_storage()._cdata not in inputs:
                    self._register(t)
        return out

    def _register(self, t: torch.Tensor) -> None:
        if t.device.type != self.device.type:
            return
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._sizes:
            return
        size = storage.nbytes()
        self._sizes[key] = size
        self.live_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        weakref.finalize(storage, self._release, key)

    def _release(self, key: int) -> None:
        self.live_bytes -= self._sizes.pop(key, 0)
