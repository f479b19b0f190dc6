"""The device a cell measures on: synchronisation and memory counters, always of that device.

Every torch.cuda call names the cell's device: with `device=cuda:1`, a bare
`torch.cuda.max_memory_allocated()` would read cuda:0. An index-less `cuda` is device 0 of the
visible ones (torch.cuda.set_device refuses a device without an index).
"""

from __future__ import annotations

import contextlib
import gc
import os

import torch


def indexed(device: str) -> torch.device:
    """`cuda` as `cuda:0`; any other device as it is."""
    device = torch.device(device)
    return torch.device(device.type, 0) if device.type == "cuda" and device.index is None else device


class CudaDevice:
    def __init__(self, device: str):
        self.device = indexed(device)
        torch.cuda.set_device(self.device)  # empty_cache and kernels without a device argument land here

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def reset_peaks(self) -> None:
        """Peaks and accumulated counters (allocation retries) start again from what is live now."""
        torch.cuda.reset_peak_memory_stats(self.device)
        torch.cuda.reset_accumulated_memory_stats(self.device)

    def start_measured_steps(self) -> None:
        self.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        self.reset_peaks()

    def peak_bytes(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def used_fraction(self) -> float:
        free, total = torch.cuda.mem_get_info(self.device)
        return 1 - free / total

    def total_bytes(self) -> int:
        """What CUDA can hand out on this device (NVML reports a little more)."""
        return torch.cuda.get_device_properties(self.device).total_memory

    def tracking(self, work) -> contextlib.AbstractContextManager[None]:
        """Nothing to watch: the allocator counts every step."""
        return contextlib.nullcontext()

    def memory(self, tracked) -> dict:
        return {
            "peak_bytes": torch.cuda.max_memory_allocated(self.device),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(self.device),
            "alloc_retries": torch.cuda.memory_stats(self.device).get("num_alloc_retries", 0),
        }

    def name(self) -> str:
        return torch.cuda.get_device_name(self.device)

    def load(self) -> None:  # a GPU's time is its own: the host's load does not disturb it the same way
        return None


class CpuDevice:
    """No allocator counters on a CPU: one extra, untimed step under the live-tensor tracker gives
    the peak (tracking every op would slow the timed steps)."""

    def __init__(self, device: str = "cpu"):
        self.device = indexed(device)

    def synchronize(self) -> None:
        pass

    def reset_peaks(self) -> None:
        pass

    def start_measured_steps(self) -> None:
        gc.collect()

    def peak_bytes(self) -> None:
        return None

    def used_fraction(self) -> None:
        return None

    def total_bytes(self) -> None:
        return None

    def tracking(self, work):
        """A context under which one step of `work` is the tracked step `memory` reads."""
        from ckptlib.memory import peak_tracked

        return peak_tracked(work, self.device)

    def memory(self, tracked) -> dict:
        """The peak of the step run under `tracking` (`tracked`: what it yielded)."""
        return {"peak_bytes": tracked.peak_bytes, "breakdown": dict(tracked.peak_by_category)}

    def name(self) -> str:
        from sweep.machine.environment import cpu_model

        return f"CPU: {cpu_model()}"

    def load(self) -> float | None:
        """The 1-minute load average per core."""
        try:
            return os.getloadavg()[0] / (os.cpu_count() or 1)
        except OSError:
            return None


def device_for(device: str) -> CudaDevice | CpuDevice:
    return CudaDevice(device) if device.startswith("cuda") else CpuDevice(device)
