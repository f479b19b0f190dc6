"""The streams and events the offloader orders its copies with, one implementation per device.

The offloader speaks only this interface, so its CUDA control flow can be driven on a CPU by a
recording stand-in (tests/support/recording_streams.py) and checked for the orderings it promises.

NOTE [ Offload ordering ]: three orderings make an asynchronous offload correct.
  1. A device-to-host copy starts only after the kernels that produced its source: the copy
     stream waits on an event the compute stream records at pack time.
  2. The source's device memory is released only after the copy finished: the compute stream
     waits on the copy's event before the offloader drops its last reference (the caching
     allocator would otherwise hand that memory to a kernel that runs before the copy).
  3. A host buffer is overwritten only after the reload that last read it: the next copy into it
     waits on the event recorded after that reload.
A reload is used only after it arrived: it runs on the compute stream, or on a side stream the
compute stream waits on before the reloaded tensor is returned.
"""

from __future__ import annotations

import contextlib

import torch


class CudaStreams:
    """torch.cuda streams of one device: the current (compute) stream and one copy stream."""

    asynchronous = True

    def __init__(self, device: torch.device):
        self.device = device
        self._copy = None

    def compute(self):
        return torch.cuda.current_stream(self.device)

    def copy_stream(self):
        if self._copy is None:
            self._copy = torch.cuda.Stream(device=self.device)
        return self._copy

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


def streams_for(device: torch.device) -> CudaStreams | SynchronousStreams:
    return CudaStreams(device) if device.type == "cuda" else SynchronousStreams()
