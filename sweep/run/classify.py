"""What an exception inside a cell means: the device ran out, the host ran out, or a failure.

Allocation failures do not all arrive as torch.OutOfMemoryError: cuBLAS and cuDNN report failed
workspace allocations as ALLOC_FAILED, and under memory pressure as NOT_INITIALIZED or
INTERNAL_ERROR; host memory runs out as "DefaultCPUAllocator: can't allocate memory" (pageable)
or MemoryError. A library error is counted as an out-of-memory only when the device was nearly
full when it was raised.
"""

from __future__ import annotations

import traceback

from sweep.store.results import CellResult
from sweep.vocabulary import Status

TRACEBACK_CHARS = 4000
REASON_CHARS = 500
DEVICE_OOM = (
    "CUDA out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUDA error: out of memory",
)
HOST_OOM = ("DefaultCPUAllocator: can't allocate memory", "CUDAHostAllocator", "std::bad_alloc")
UNDER_PRESSURE = (
    "CUBLAS_STATUS_NOT_INITIALIZED",
    "CUBLAS_STATUS_INTERNAL_ERROR",
    "CUDNN_STATUS_NOT_INITIALIZED",
    "CUDNN_STATUS_INTERNAL_ERROR",
    "CUDNN_STATUS_MAPPING_ERROR",
)
NEARLY_FULL = 0.95  # share of the card in use above which an UNDER_PRESSURE error is an OOM


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:REASON_CHARS]


def failure(error: BaseException) -> CellResult:
    tail = "".join(traceback.format_exception(error))[-TRACEBACK_CHARS:]
    return CellResult(Status.FAILED, f"{type(error).__name__}: {error}"[:REASON_CHARS], traceback=tail)


def classify(error: Exception, device) -> CellResult:
    """The status an exception from a cell's build or steps stands for. `device` (a
    sweep.run.scenarios.devices device) tells the allocator's peak and how full the card is."""
    import torch

    message = str(error)
    if isinstance(error, MemoryError) or any(m in message for m in HOST_OOM):
        return CellResult(Status.HOST_OOM, f"host memory ran out: {first_line(error)}")
    device_oom = isinstance(error, torch.OutOfMemoryError) or any(m in message for m in DEVICE_OOM)
    pressure = None
    if not device_oom and any(m in message for m in UNDER_PRESSURE):
        pressure = device.used_fraction()
        device_oom = pressure is not None and pressure >= NEARLY_FULL
    if device_oom:
        reason = first_line(error)
        if pressure is not None:
            reason = f"{reason} ({pressure:.0%} of the device in use: an allocation failure)"
        return CellResult(Status.OOM, reason, peak_at_oom_bytes=device.peak_bytes())
    return failure(error)
