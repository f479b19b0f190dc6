"""Makes a CPU-only process look like a CUDA host, and records every CUDA query made in it.

Imported first in a fork server's preload (tests/test_isolation.py): torch.cuda says one H100 is
there (NVML, through tests.support.fake_nvml, says so too), and each call that would query or start
CUDA on a real host is recorded. A fork server that preloads without reaching any of them is
fork-safe on a real GPU host.
"""

from __future__ import annotations

import torch

from sweep.results import CellResult
from tests.support import fake_nvml

CALLS: list[str] = []

fake_nvml.install([fake_nvml.h100("00000000:1B:00.0", "GPU-11111111-2222-3333-4444-555555555555")])


def _recording(name, value):
    def call(*args, **kwargs):
        CALLS.append(name)
        return value

    return call


STUBS = {
    (torch.cuda, "is_available"): _recording("is_available", True),
    (torch.cuda, "device_count"): _recording("device_count", 1),
    (torch.cuda, "get_device_capability"): _recording("get_device_capability", (9, 0)),
    (torch.cuda, "get_device_properties"): _recording("get_device_properties", None),
    (torch.cuda, "_lazy_init"): _recording("_lazy_init", None),
    (torch.cuda, "init"): _recording("init", None),
}
if hasattr(torch._C, "_cuda_getDeviceCount"):  # a CPU build has none; adding one would make torch think it has CUDA
    STUBS[(torch._C, "_cuda_getDeviceCount")] = _recording("_cuda_getDeviceCount", 1)
for (owner, name), stub in STUBS.items():
    setattr(owner, name, stub)
torch.version.cuda = "12.8"  # libraries gate capability checks on a CUDA build


def report_preload() -> CellResult:
    """A child's first act: what the fork server asked of CUDA while preloading, and the state it forked in."""
    from sweep import cuda_guard

    calls_in_server = list(CALLS)
    return CellResult(
        "ok",
        report={
            "calls_during_preload": calls_in_server,
            "guard_answered": sorted({name for name, _ in cuda_guard.asked}),
            "guard_refused": cuda_guard.refused,
            "initialized": torch.cuda.is_initialized(),
            "bad_fork": torch.cuda._is_in_bad_fork(),
            "is_available_after_lift": torch.cuda.is_available(),  # the stub again: the guard was lifted
            "calls_after_lift": CALLS[len(calls_in_server) :],
        },
    )
