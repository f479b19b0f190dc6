"""Saved-tensor hooks that park large activations in host memory until backward needs them.

On CUDA the device-to-host copies run on a copy stream, ordered after the producing kernels by
an event; up to `stash_depth` of them are in flight, and the compute stream waits on the oldest
only when one more would pass that depth. A device tensor is dropped only once the compute stream
has waited on its copy, so the caching allocator cannot hand its memory to a kernel that runs
before the copy finished. In backward, when a region's first tensor is reloaded, the region
recomputed next (the one packed just before it in forward) is reloaded on a prefetch stream, and
the compute stream waits on that reload's event only when it uses the tensor.

A step's backward must run before the next step's forward: buffers still parked when a forward
starts belong to a step whose backward never ran (a validation pass with grad enabled), and are
reclaimed then (`abandoned_steps`). The orderings are NOTE [ Offload ordering ] in
ckptlib/streams.py; every stream operation goes through that module's interface.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import deque
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
    tensors_prefetched: int = 0  # reloaded ahead of use on the prefetch stream
    tensors_kept: int = 0  # small tensors, parameters and buffers stay where they are
    tensors_deduplicated: int = 0  # the same view saved twice is offloaded once
    tensors_made_dense: int = 0  # non-dense views copied dense on the compute stream first
    tensors_kept_host_full: int = 0  # kept on the device: the host pool reached its limit this step
    max_copies_in_flight: int = 0


def _dense(tensor: torch.Tensor) -> bool:
    """Non-overlapping and dense: its elements fill exactly `numel` slots of memory, in any dimension
    order, so a 1-D host buffer of `numel` holds it with its own strides."""
    expected = 1
    for size, stride in sorted(zip(tensor.shape, tensor.stride()), key=lambda dim: dim[1]):
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


def _identity(tensor: torch.Tensor) -> tuple:
    """The same view of the same memory (a saved tensor may reach the hook as another Python object)."""
    return storage_id(tensor), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor.dtype


class _Parked:
    """One offloaded tensor: its host copy, the layout to rebuild it with, and its region."""

    __slots__ = (
        "buffer",
        "template",
        "device",
        "copied",
        "device_ref",
        "users",
        "reloaded",
        "arrived",
        "nbytes",
        "region",
    )

    def __init__(self, buffer: HostBuffer, source: torch.Tensor, region: int):
        self.buffer: HostBuffer | None = buffer  # None once released (reloaded, or reclaimed)
        with untracked():  # bookkeeping, not the device's memory (a prediction's device is meta too)
            self.template = torch.empty_like(source, device="meta")  # shape, strides, dtype
        self.device = source.device
        self.copied = None  # event recorded after the device-to-host copy
        self.device_ref = source  # keeps the device memory until the copy is known to be done
        self.users = 1
        self.reloaded: torch.Tensor | None = None
        self.arrived = None  # event the compute stream waits on before using a prefetched reload
        self.nbytes = source.numel() * source.element_size()
        self.region = region

    def host_view(self) -> torch.Tensor:
        return self.buffer.tensor.as_strided(self.template.shape, self.template.stride())


class Offloader:
    def __init__(
        self,
        pool: HostPool,
        min_bytes: int,
        stash_depth: int = 4,
        prefetch: bool = True,
        streams_for=None,
    ):
        assert stash_depth >= 1, "at least the copy just issued is in flight"
        self.pool = pool
        self.min_bytes = min_bytes
        self.stash_depth = stash_depth
        self.prefetch = prefetch
        self.keep: set[int] = set()  # storage ids of parameters and buffers
        self.counters = OffloadCounters()
        self.abandoned_steps = 0  # steps whose backward never ran (their buffers were reclaimed)
        self._streams_for = streams_for or device_streams.streams_for
        self._streams: dict[torch.device, object] = {}
        self._in_flight: deque[_Parked] = deque()  # copies the compute stream has not waited on yet
        self._regions: list[list[_Parked]] = []  # this step's parked tensors, by region in forward order
        self._region: int | None = None
        self._grad_only = False
        self._seen: dict[tuple, tuple[weakref.ref, _Parked]] = {}
        self._only: set[tuple] | None = None  # when set, only these tensors are offloaded
        self._host_full = False
        self._backward_started = False
        self._prefetched_from: set[int] = set()  # regions whose first reload started the next prefetch

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

    @contextlib.contextmanager
    def hooks(self, grad_only: bool = False):
        """One region: what is saved inside is offloaded, and reloaded together in backward.
        `grad_only`: tensors autograd made (a grad_fn) only, as SimpleTuner's offload hooks do:
        what needs no gradient (dropout masks, norm statistics) stays on the device."""
        previous = self._region, self._grad_only
        self._region, self._grad_only = len(self._regions), grad_only
        self._regions.append([])
        try:
            with saved_tensors_hooks(self.pack, self.unpack):
                yield
        finally:
            self._region, self._grad_only = previous

    def reset_step(self) -> None:
        """A new step begins: reclaim what a step without backward left parked."""
        abandoned = [p for region in self._regions for p in region if p.buffer is not None]
        if abandoned:
            self._retire_in_flight(0)
            streams = self.streams(abandoned[0].device)
            ready = streams.record(streams.compute())
            for parked in abandoned:
                self.pool.release(parked.buffer, ready)
                parked.buffer, parked.reloaded = None, None
            self.abandoned_steps += 1
        self.counters = OffloadCounters()
        self._regions.clear()
        self._seen.clear()
        self._prefetched_from.clear()
        self._host_full = self._backward_started = False

    def pack(self, tensor: torch.Tensor):
        nbytes = tensor.numel() * tensor.element_size()
        if (
            nbytes < self.min_bytes
            or tensor.layout != torch.strided
            or isinstance(tensor, torch.nn.Parameter)
            or storage_id(tensor) in self.keep
            or (self._only is not None and _identity(tensor) not in self._only)
            or (self._grad_only and tensor.grad_fn is None)
        ):
            self.counters.tensors_kept += 1
            return tensor
        key = (*_identity(tensor), tensor._version)
        hit = self._seen.get(key)
        if hit is not None and hit[0]() is not None and hit[1].users > 0 and hit[1].reloaded is None:
            hit[1].users += 1
            self.counters.tensors_deduplicated += 1
            return hit[1]
        buffer = None if self._host_full else self.pool.acquire(tensor.numel(), tensor.dtype, tensor.layout)
        if buffer is None:  # the host pool is at its limit: recompute-only for the rest of the step
            self._host_full = True
            self.counters.tensors_kept_host_full += 1
            return tensor
        source = tensor
        if not _dense(tensor):
            # On the compute stream, so its memory is freed in the compute stream's order.
            with untracked():
                source = tensor.contiguous()
            self.counters.tensors_made_dense += 1
        self._retire_in_flight(self.stash_depth - 1)
        parked = _Parked(buffer, source, self._region)
        self._copy_out(parked, source)
        self._regions[self._region].append(parked)
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
            if parked.buffer is None:
                raise RuntimeError(
                    "an offloaded activation's host buffer was reclaimed when the next step's forward began; "
                    "run a step's backward before the next forward"
                )
            if not self._backward_started:  # every copy of the forward is waited on once
                self._backward_started = True
                self._retire_in_flight(0)
            parked.reloaded = self._copy_in(parked)
        elif parked.arrived is not None:  # prefetched: wait for it only now, just before use
            streams = self.streams(parked.device)
            streams.wait(streams.compute(), parked.arrived)
            streams.use_on(parked.reloaded, streams.compute())
            parked.arrived = None
        # A CPU copies synchronously: nothing to overlap, so no search for the region to prefetch.
        if self.prefetch and parked.region not in self._prefetched_from and self.streams(parked.device).asynchronous:
            self._prefetched_from.add(parked.region)
            self._prefetch_region_before(parked.region)
        parked.users -= 1
        out = parked.reloaded
        if parked.users == 0:
            parked.reloaded = None
        return out

    def streams(self, device: torch.device):
        if device not in self._streams:
            self._streams[device] = self._streams_for(device)
        return self._streams[device]

    def _copy_out(self, parked: _Parked, source: torch.Tensor) -> None:
        streams = self.streams(source.device)
        copy = streams.copy_stream()
        with untracked():
            streams.wait(copy, streams.record(streams.compute()))  # NOTE [ Offload ordering ] 1
            if parked.buffer.ready is not None:  # NOTE [ Offload ordering ] 3
                streams.wait(copy, parked.buffer.ready)
            with streams.on(copy):
                streams.to_host(parked.host_view(), source)
                parked.copied = streams.record(copy)
        self._in_flight.append(parked)
        self.counters.max_copies_in_flight = max(self.counters.max_copies_in_flight, len(self._in_flight))
        if not streams.asynchronous:  # the copy is done: nothing to wait for
            self._retire_in_flight(0)

    def _retire_in_flight(self, keep: int) -> None:
        """Wait (on the compute stream) for the oldest copies until at most `keep` are in flight."""
        while len(self._in_flight) > keep:
            parked = self._in_flight.popleft()
            streams = self.streams(parked.device)
            streams.wait(streams.compute(), parked.copied)  # NOTE [ Offload ordering ] 2
            parked.device_ref = None

    def _copy_in(self, parked: _Parked) -> torch.Tensor:
        streams = self.streams(parked.device)
        out = torch.empty_like(parked.template, device=parked.device)
        with untracked():
            streams.to_device(out, parked.host_view())  # on the compute stream: used after it in stream order
        self._release(parked, streams.record(streams.compute()))
        self.counters.tensors_reloaded += 1
        self.counters.bytes_reloaded += parked.nbytes
        return out

    def _prefetch_region_before(self, region: int) -> None:
        """Reload, on the prefetch stream, the nearest earlier region that still has tensors parked."""
        earlier = next((r for r in range(region - 1, -1, -1) if self._waiting(r)), None)
        if earlier is None:
            return
        for parked in self._waiting(earlier):
            streams = self.streams(parked.device)
            stream = streams.prefetch_stream()
            with streams.on(stream):
                out = torch.empty_like(parked.template, device=parked.device)
                with untracked():
                    streams.wait(stream, parked.copied)  # NOTE [ Offload ordering ] 4
                    streams.to_device(out, parked.host_view())
                    parked.arrived = streams.record(stream)
            self._release(parked, parked.arrived)
            parked.reloaded = out
            self.counters.tensors_reloaded += 1
            self.counters.tensors_prefetched += 1
            self.counters.bytes_reloaded += parked.nbytes

    def _waiting(self, region: int) -> list[_Parked]:
        return [p for p in self._regions[region] if p.reloaded is None and p.buffer is not None]

    def _release(self, parked: _Parked, ready) -> None:
        self.pool.release(parked.buffer, ready)  # NOTE [ Offload ordering ] 3: the next writer waits on `ready`
        parked.buffer = None
