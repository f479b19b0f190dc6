"""A CUDA host made at torch's C boundary, for a CPU build of torch.

`FakeCuda(gpus).install(monkeypatch)` gives `torch._C` the entry points a CUDA build of torch has
(device count, init, set/get/exchange device, synchronize, the caching allocator's stats, streams
and events, the runtime's cudaMemGetInfo) and leaves every Python function of `torch.cuda` as it
is: torch's own argument checks, lazy initialisation and device-index handling run, and fail, as
they would on a GPU. Each entry point is logged with the device it acted on, in `calls`.

Kernels are not faked: a tensor cannot be on `cuda` here. Tests either build their workloads on
the CPU, or enter `kernels_on_cpu()`, which places every tensor asked for on `cuda` on the CPU
instead (the one stand-in above the C boundary, and only for tensor placement). What needs CUDA
below the entry points still cannot run: pinned host memory, CUDA generators, a card running out.
The allocator's peak is what a test sets in `peak_bytes`, or with `rss_peaks` the process's
resident high-water mark (so a sweep on the fake host records a peak of the right kind).

NVML is faked apart (tests/support/fake_nvml.py): NVML reports a little more memory than CUDA can
hand out, as on every real card.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from tests.support.fake_gpus import H100, H200, MIB, FakeGpu  # noqa: F401 - the cards, torch-free

CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA


@dataclass
class _Properties:
    """The fields of torch._C._CudaDeviceProperties that torch and the project read."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    uuid: str
    L2_cache_size: int = 50 * MIB
    warp_size: int = 32
    max_threads_per_multi_processor: int = 2048
    regs_per_multiprocessor: int = 65536
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    gcnArchName: str = "NVIDIA CUDA"  # noqa: N815


def _resident_peak_bytes() -> int:
    """VmHWM of this process (Linux), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _empty_stats() -> dict:
    return {"current": 0, "peak": 0, "allocated": 0, "freed": 0}


@dataclass
class FakeCuda:
    gpus: list[FakeGpu] = field(default_factory=lambda: [H100])
    calls: list[tuple] = field(default_factory=list)  # (entry point, device index or None, ...)
    current: int = 0
    bad_fork: bool = False
    alloc_retries: dict[int, int] = field(default_factory=dict)
    peak_bytes: dict[int, int] = field(default_factory=dict)  # what max_memory_allocated reads
    rss_peaks: bool = False  # read the peak as the process's resident high-water mark instead
    current_stream: dict[int, int] = field(default_factory=dict)  # device -> stream id
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    # ---- the entry points -------------------------------------------------------------------

    def _log(self, name: str, *args) -> None:
        self.calls.append((name, *args))

    def _check(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise RuntimeError("CUDA error: invalid device ordinal")
        return index

    def get_device_count(self) -> int:
        self._log("_cuda_getDeviceCount")
        return len(self.gpus)

    def init(self) -> None:
        """What THCPModule_initExtension does: define the module attributes CUDA needs."""
        self._log("_cuda_init")
        torch.cuda._get_device_properties = self.get_device_properties
        torch.cuda.default_generators = tuple(torch.Generator() for _ in self.gpus)

    def get_device_properties(self, index: int) -> _Properties:
        gpu = self.gpus[self._check(index)]
        self._log("_get_device_properties", index)
        return _Properties(gpu.name, gpu.major, gpu.minor, gpu.total_memory, gpu.multi_processor_count, gpu.uuid)

    @staticmethod
    def lazy_init() -> None:
        """What torch::utils::device_lazy_init does in the C++ entry points that need CUDA: call
        torch.cuda._lazy_init (looked up now, as C++ does, so a guard that replaced it is met)."""
        torch.cuda._lazy_init()

    def set_device(self, index: int) -> None:
        self._log("_cuda_setDevice", index)
        self.lazy_init()
        self.current = self._check(index)

    def get_device(self) -> int:
        self._log("_cuda_getDevice")
        self.lazy_init()
        return self.current

    def exchange_device(self, index: int) -> int:
        if index < 0:
            return -1
        self.lazy_init()
        previous, self.current = self.current, self._check(index)
        return previous

    def maybe_exchange_device(self, index: int) -> int:
        if index < 0:
            return -1
        previous, self.current = self.current, self._check(index)
        return previous

    def synchronize(self) -> None:
        self._log("_cuda_synchronize", self.current)

    def peak(self, index: int) -> int:
        return _resident_peak_bytes() if self.rss_peaks else self.peak_bytes.get(index, 0)

    def memory_stats(self, index: int) -> dict:
        self._log("_cuda_memoryStats", self._check(index))
        allocated = {**_empty_stats(), "peak": self.peak(index)}
        reserved = {**_empty_stats(), "peak": 2 * self.peak(index)}
        return {
            "allocated_bytes": {"all": allocated},
            "reserved_bytes": {"all": reserved},
            "num_alloc_retries": self.alloc_retries.get(index, 0),
        }

    def reset_peak(self, index: int) -> None:
        self._log("_cuda_resetPeakMemoryStats", self._check(index))
        if self.rss_peaks:
            Path("/proc/self/clear_refs").write_text("5")  # the high-water mark starts again from now

    def reset_accumulated(self, index: int) -> None:
        self._log("_cuda_resetAccumulatedMemoryStats", self._check(index))
        self.alloc_retries[index] = 0

    def empty_cache(self) -> None:
        self._log("_cuda_emptyCache", self.current)

    def stream_of(self, index: int) -> tuple[int, int, int]:
        index = self.current if index is None or index < 0 else self._check(index)
        return self.current_stream.get(index, 0), index, CUDA_DEVICE_TYPE

    def get_current_stream(self, index: int) -> tuple[int, int, int]:
        self._log("_cuda_getCurrentStream", index)
        return self.stream_of(index)

    def get_default_stream(self, index: int) -> tuple[int, int, int]:
        return 0, self.stream_of(index)[1], CUDA_DEVICE_TYPE

    def set_stream(self, stream_id: int, device_index: int, device_type: int) -> None:
        self._log("_cuda_setStream", device_index, stream_id)
        self.current_stream[self._check(device_index)] = stream_id

    def mem_get_info(self, index: int) -> tuple[int, int]:
        self._log("cudaMemGetInfo", self._check(index))
        total = self.gpus[index].total_memory
        return total - self.peak(index), total

    # ---- installing them --------------------------------------------------------------------

    def entry_points(self) -> dict:
        """torch._C's CUDA functions, by name."""
        return {
            "_cuda_getDeviceCount": self.get_device_count,
            "_cuda_init": self.init,
            "_cuda_setDevice": self.set_device,
            "_cuda_getDevice": self.get_device,
            "_cuda_exchangeDevice": self.exchange_device,
            "_cuda_maybeExchangeDevice": self.maybe_exchange_device,
            "_cuda_synchronize": self.synchronize,
            "_cuda_memoryStats": self.memory_stats,
            "_cuda_resetPeakMemoryStats": self.reset_peak,
            "_cuda_resetAccumulatedMemoryStats": self.reset_accumulated,
            "_cuda_emptyCache": self.empty_cache,
            "_cuda_getCurrentStream": self.get_current_stream,
            "_cuda_getDefaultStream": self.get_default_stream,
            "_cuda_getCurrentRawStream": lambda index: self.stream_of(index)[0],
            "_cuda_setStream": self.set_stream,
            "_cuda_getArchFlags": lambda: "sm_80 sm_90",
            "_cuda_isInBadFork": lambda: self.bad_fork,
            "_cuda_sleep": lambda cycles: self._log("_cuda_sleep", cycles),
        }

    def install(self, monkeypatch=None) -> FakeCuda:
        """Put the entry points in place (undone with `monkeypatch`; for the process's life without,
        and then this is `installed`)."""
        global installed
        if monkeypatch is None:
            installed = self
        patch = _Patcher(monkeypatch)
        for name, function in self.entry_points().items():
            patch(torch._C, name, function)
        patch(torch._C, "_has_cuda", True)
        # torch.cuda bound these from torch._C at import, when a CPU build had none of them
        patch(torch.cuda, "_exchange_device", self.exchange_device)
        patch(torch.cuda, "_maybe_exchange_device", self.maybe_exchange_device)
        patch(torch.cuda, "_is_in_bad_fork", lambda: self.bad_fork)
        patch(torch.cuda, "_cudart", _Runtime(self))
        patch(torch.cuda, "_initialized", False)
        patch(torch.cuda, "_cached_device_count", None)
        patch(torch.cuda, "default_generators", ())
        patch(torch.cuda, "_get_device_properties", None)
        patch(torch.version, "cuda", "12.8")
        _fill_stream_and_event_bases(self, patch)
        return self


installed: FakeCuda | None = None  # the process's CUDA host (tests/support/fake_cuda_host)


class _Runtime:
    """torch._C._cudart: the CUDA runtime functions torch.cuda calls."""

    def __init__(self, cuda: FakeCuda):
        self.cudaMemGetInfo = cuda.mem_get_info


class _Patcher:
    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch

    def __call__(self, owner, name, value) -> None:
        if self.monkeypatch is not None:
            self.monkeypatch.setattr(owner, name, value, raising=False)
        else:
            setattr(owner, name, value)


def _fill_stream_and_event_bases(cuda: FakeCuda, patch) -> None:
    """A CPU build defines torch._C._CudaStreamBase and _CudaEventBase as classes that refuse to
    be made; torch.cuda.Stream and Event derive from them. Give them what the C types do."""
    stream_base, event_base = torch._C._CudaStreamBase, torch._C._CudaEventBase

    def new_stream(cls, priority=0, stream_id=None, device_index=None, device_type=None, stream_ptr=None):
        cuda.lazy_init()
        stream = object.__new__(cls)
        stream.stream_id = next(cuda._ids) if stream_id is None else stream_id
        stream.device_index = cuda.current if device_index is None else cuda._check(device_index)
        stream.device_type = CUDA_DEVICE_TYPE
        stream.priority = priority
        if stream_id is None:
            cuda._log("new_stream", stream.device_index, stream.stream_id)
        return stream

    def new_event(cls, enable_timing=False, blocking=False, interprocess=False, external=False):
        event = object.__new__(cls)
        event.event_id = next(cuda._ids)
        return event

    members = {
        stream_base: {
            "__new__": new_stream,
            "__init__": lambda self, *args, **kwargs: None,
            "query": lambda self: True,
            "synchronize": lambda self: cuda._log("stream_synchronize", self.device_index, self.stream_id),
            "__eq__": lambda self, other: (
                isinstance(other, stream_base)
                and (self.stream_id, self.device_index) == (other.stream_id, other.device_index)
            ),
            "__hash__": lambda self: hash((self.stream_id, self.device_index)),
            "device": property(lambda self: torch.device("cuda", self.device_index)),
            "cuda_stream": property(lambda self: self.stream_id),
        },
        event_base: {
            "__new__": new_event,
            "__init__": lambda self, *args, **kwargs: None,
            "record": lambda self, stream=None: cuda._log(
                "event_record", *(cuda.stream_of(None) if stream is None else (stream.stream_id,)), self.event_id
            ),
            "wait": lambda self, stream=None: cuda._log(
                "event_wait", *(cuda.stream_of(None) if stream is None else (stream.stream_id,)), self.event_id
            ),
            "query": lambda self: True,
            "synchronize": lambda self: None,
            "elapsed_time": lambda self, end: 0.0,
        },
    }
    for base, attributes in members.items():
        for name, value in attributes.items():
            patch(base, name, value)


class _CudaOnCpu(TorchFunctionMode):
    """Every tensor asked for on `cuda` is made on the CPU (there are no CUDA kernels here)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.device:  # a device is only a name: torch.cuda's own calls take cuda ones
            return func(*args, **kwargs)
        args = tuple(_on_cpu(a) for a in args)
        kwargs = {k: _on_cpu(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def _on_cpu(value):
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("cpu")
    if isinstance(value, str) and (value == "cuda" or value.startswith("cuda:")):
        return "cpu"
    return value


@contextlib.contextmanager
def kernels_on_cpu():
    with _CudaOnCpu():
        yield


def enter_kernels_on_cpu() -> None:
    """For a whole process (tests/support/fake_cuda_host): the mode stays entered."""
    _CudaOnCpu().__enter__()
