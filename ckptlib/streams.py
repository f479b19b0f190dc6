"""The streams and events the offloader orders its copies with, one implementation per device.

The offloader speaks only this interface, so its CUDA control flow can be driven on a CPU by a
recording stand-in (tests/support/recording_streams.py) and checked for the orderings it promises.

NOTE [ Offload ordering ]: four orderings make an asynchronous offload correct.
  1. A device-to-host copy starts only after the kernels that produced its source: the copy
     stream waits on an event the compute stream records at pack time.
  2. The source's device memory is released only after the copy finished: the compute stream
     waits on the copy's event before the offloader drops its last reference (the caching
     allocator would otherwise hand that memory to a kernel that runs before the copy).
  3. A host buffer is overwritten only after the reload that last read it: the next copy into it
     waits on the event recorded after that reload.
  4. A reload reads its host buffer only after the device-to-host copy into it finished: the
     compute stream has waited on the copy's event (ordering 2 at the first reload of a step), and
     a prefetch on its own stream waits on that event itself.
A reload is used only after it arrived: it runs on the compute stream, or on the prefetch stream
the compute stream waits on before the reloaded tensor is returned; a prefetched tensor is then
marked as used on the compute stream, so the allocator does not hand its memory back to the
prefetch stream while compute still reads it.
"""

from __future__ import annotations

import contextlib

import torch


class CudaStreams:
    """torch.cuda streams of one device: the current (compute) stream, a copy stream for
    device-to-host copies and a prefetch stream for reloads ahead of use."""

    asynchronous = True

    def __init__(self, device: torch.device):
        self.device = device
        self._copy = self._prefetch = None

    def compute(self):
        return torch.cuda.current_stream(self.device)

    def copy_stream(self):
        if self._copy is None:
            self._copy = torch.cuda.Stream(device=self.device)
        return self._copy

    def prefetch_stream(self):
        if self._prefetch is None:
            self._prefetch = torch.cuda.Stream(device=self.device)
        return self._prefetch

    def use_on(self, tensor: torch.Tensor, stream) -> None:
        tensor.record_stream(stream)

    def record(self, stream):
        return stream.record_event()

    def wait(self, stream, event) -> None:
        stream.wait_event(event)

    def on(self, stream):
        return torch.cuda.stream(stream)

    def to_host(self, host: torch.Tensor, source: torch.Tensor) -> None:
        host.copy_(source, non_blocking=True)

    def to_device(self, destination: torch.Tensor, host: torch.Tensor) -> None:
        destination.copy_(host, non_blocking=True)


class SynchronousStreams:
    """A device without streams (CPU): every copy is done when it returns; events are None."""

    asynchronous = False

    def compute(self):
        return None

    def copy_stream(self):
        return None

    def prefetch_stream(self):
        return None

    def use_on(self, tensor: torch.Tensor, stream) -> None:
        pass

    def record(self, stream):
        return None

    def wait(self, stream, event) -> None:
        pass

    def on(self, stream):
        return contextlib.nullcontext()

    def to_host(self, host: torch.Tensor, source: torch.Tensor) -> None:
        host.copy_(source)

    def to_device(self, destination: torch.Tensor, host: torch.Tensor) -> None:
        destination.copy_(host)


class ModelledStreams(SynchronousStreams):
    """CUDA's bookkeeping without CUDA (the predictor's cuda device model): copies are done at once,
    but the offloader keeps its stash and prefetches as it would on a GPU, so what they hold on
    the device is in the prediction."""

    asynchronous = True

    def record(self, stream):
        return object()


def streams_for(device: torch.device) -> CudaStreams | SynchronousStreams:
    return CudaStreams(device) if device.type == "cuda" else SynchronousStreams()
