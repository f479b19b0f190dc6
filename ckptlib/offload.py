"""Saved-tensor hooks that park large activations in host memory until backward needs them.

On CUDA the device-to-host copy runs on a dedicated stream, ordered after the producing kernels
by an event; the compute stream never blocks on it in forward. The device tensor is dropped only
once the compute stream has waited on the copy's event (at the next pack, or before a reload), so
the caching allocator cannot hand its memory to a kernel that runs before the copy finished. The
orderings are stated in NOTE [ Offload ordering ] (ckptlib/streams.py); every stream operation
goes through that module's interface.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass

import torch
from torch.autograd.graph import saved_tensors_hooks

from . import streams as device_streams
from .memory import storage_id, untracked
from .pool import HostBuffer, HostPool


@dataclass
class OffloadCounters:
    tensors_offloaded: int = 0
    bytes_offloaded: int = 0
    tensors_reloaded: int = 0
    bytes_reloaded: int = 0
    tensors_kept: int = 0  # small tensors, parameters and buffers stay where they are
    tensors_deduplicated: int = 0  # the same view saved twice is offloaded once


def _identity(tensor: torch.Tensor) -> tuple:
    """The same view of the same memory (a saved tensor may reach the hook as another Python object)."""
    return storage_id(tensor), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor.dtype


class _Parked:
    """One offloaded tensor: its host copy and the layout to rebuild it with."""

    __slots__ = ("buffer", "template", "device", "copied", "device_ref", "users", "reloaded", "nbytes")

    def __init__(self, buffer: HostBuffer, source: torch.Tensor):
        self.buffer = buffer
        self.template = torch.empty_like(source, device="meta")  # shape, strides, dtype
        self.device = source.device
        self.copied = None  # CUDA event recorded after the device-to-host copy
        self.device_ref = source  # keeps the device memory until the copy is known to be done
        self.users = 1
        self.reloaded: torch.Tensor | None = None
        self.nbytes = source.numel() * source.element_size()

    def host_view(self) -> torch.Tensor:
        return self.buffer.tensor.as_strided(self.template.shape, self.template.stride())


class Offloader:
    def __init__(self, pool: HostPool, min_bytes: int, keep: set[int] | None = None):
        self.pool = pool
        self.min_bytes = min_bytes
        self.keep = keep if keep is not None else set()  # storage ids of parameters and buffers
        self.counters = OffloadCounters()
        self._pending: list[_Parked] = []
        self._seen: dict[tuple, tuple[weakref.ref, _Parked]] = {}
        self._streams: dict[torch.device, object] = {}
        self._only: set[tuple] | None = None  # when set, only these tensors are offloaded

    @contextlib.contextmanager
    def only(self, tensors: tuple | None):
        """Offload just `tensors` inside this block (None: any saved tensor). Leaf tensors (the
        caller's inputs) are left out: the caller keeps them alive, so a host copy saves nothing."""
        previous = self._only
        self._only = (
            None
            if tensors is None
            else {_identity(t) for t in tensors if isinstance(t, torch.Tensor) and t.grad_fn is not None}
        )
        try:
            yield
        finally:
            self._only = previous

    def hooks(self) -> saved_tensors_hooks:
        return saved_tensors_hooks(self.pack, self.unpack)

    def reset_step(self) -> None:
        self.counters = OffloadCounters()
        self._seen.clear()

    def pack(self, tensor: torch.Tensor):
        nbytes = tensor.numel() * tensor.element_size()
        if (
            nbytes < self.min_bytes
            or isinstance(tensor, torch.nn.Parameter)
            or storage_id(tensor) in self.keep
            or (self._only is not None and _identity(tensor) not in self._only)
        ):
            self.counters.tensors_kept += 1
            return tensor
        key = (*_identity(tensor), tensor._version)
        hit = self._seen.get(key)
        if hit is not None and hit[0]() is not None and hit[1].users > 0 and hit[1].reloaded is None:
            hit[1].users += 1
            self.counters.tensors_deduplicated += 1
            return hit[1]
        self._retire_pending()
        parked = _Parked(self.pool.acquire(tensor.numel(), tensor.dtype), tensor)
        self._copy_out(parked, tensor)
        self._seen[key] = (weakref.ref(tensor.untyped_storage()), parked)
        self.counters.tensors_offloaded += 1
        self.counters.bytes_offloaded += nbytes
        return parked

    def unpack(self, parked):
        if isinstance(parked, torch.Tensor):
            return parked
        if parked.users <= 0:
            raise RuntimeError(
                "an offloaded activation was reloaded twice; backward through the graph twice "
                "(retain_graph) is not supported with activation offload"
            )
        if parked.reloaded is None:
            self._retire_pending()
            parked.reloaded = self._copy_in(parked)
            self.counters.tensors_reloaded += 1
            self.counters.bytes_reloaded += parked.nbytes
        parked.users -= 1
        out = parked.reloaded
        if parked.users == 0:
            parked.reloaded = None
        return out

    def streams(self, device: torch.device):
        if device not in self._streams:
            self._streams[device] = device_streams.streams_for(device)
        return self._streams[device]

    def _copy_out(self, parked: _Parked, tensor: torch.Tensor) -> None:
        streams = self.streams(tensor.device)
        copy = streams.copy_stream()
        with untracked():
            streams.wait(copy, streams.record(streams.compute()))  # NOTE [ Offload ordering ] 1
            if parked.buffer.ready is not None:  # NOTE [ Offload ordering ] 3
                streams.wait(copy, parked.buffer.ready)
            with streams.on(copy):
                streams.to_host(parked.host_view(), tensor)
                parked.copied = streams.record(copy)
        self._pending.append(parked)
        if not streams.asynchronous:  # the copy is done: nothing to wait for
            self._retire_pending()

    def _retire_pending(self) -> None:
        for parked in self._pending:
            streams = self.streams(parked.device)
            streams.wait(streams.compute(), parked.copied)  # NOTE [ Offload ordering ] 2
            parked.device_ref = None
        self._pending.clear()

    def _copy_in(self, parked: _Parked) -> torch.Tensor:
        streams = self.streams(parked.device)
        out = torch.empty_like(parked.template, device=parked.device)
        with untracked():
            streams.to_device(out, parked.host_view())  # on the compute stream: used after it in stream order
        self.pool.release(parked.buffer, streams.record(streams.compute()))
        return out
