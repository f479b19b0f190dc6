"""A stand-in for `pynvml` (the NVML binding) describing a made-up machine, for tests on hosts
without GPUs. `install(devices)` puts it in sys.modules; each device is a dict (see `H100`)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

NVML_DEVICE_MIG_ENABLE = 1
NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2


class NVMLError(Exception):
    pass


@dataclass
class Device:
    name: str
    uuid: str
    bus_id: str
    memory: int
    capability: tuple[int, int] = (9, 0)
    mig_mode: int | None = None  # None: not MIG capable
    migs: list = field(default_factory=list)  # Device entries with gi/ci set
    gi: int | None = None
    ci: int | None = None
    parent: Device | None = None


@dataclass
class Memory:
    total: int
    free: int
    used: int = 0


@dataclass
class Pci:
    busId: bytes


STATE = {"devices": [], "inits": 0, "calls": []}


def nvmlInit():
    STATE["inits"] += 1


def nvmlShutdown():
    STATE["inits"] -= 1


def _log(name):
    STATE["calls"].append(name)


def nvmlDeviceGetCount():
    _log("count")
    return len(STATE["devices"])


def nvmlDeviceGetHandleByIndex(i):  # NVML's own enumeration order (not PCI order here, on purpose)
    return STATE["devices"][i]


def nvmlDeviceGetHandleByUUID(uuid):
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    for device in STATE["devices"]:
        for candidate in (device, *device.migs):
            if candidate.uuid == uuid:
                return candidate
    raise NVMLError("Not Found")


def nvmlDeviceGetName(h):
    return h.name


def nvmlDeviceGetUUID(h):
    return h.uuid


def nvmlDeviceGetMemoryInfo(h):
    return Memory(total=h.memory, free=h.memory)


def nvmlDeviceGetPciInfo(h):
    return Pci(busId=(h.parent or h).bus_id.encode())


def nvmlSystemGetDriverVersion():
    return "580.00"


def nvmlDeviceGetCudaComputeCapability(h):
    return h.capability


def nvmlDeviceGetMigMode(h):
    if h.mig_mode is None:
        raise NVMLError("Not Supported")
    return h.mig_mode, h.mig_mode


def nvmlDeviceIsMigDeviceHandle(h):
    return h.parent is not None


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h):
    return h.parent


def nvmlDeviceGetMaxMigDeviceCount(h):
    return len(h.migs)


def nvmlDeviceGetMigDeviceHandleByIndex(h, i):
    return h.migs[i]


def nvmlDeviceGetGpuInstanceId(h):
    return h.gi


def nvmlDeviceGetComputeInstanceId(h):
    return h.ci


def nvmlDeviceGetPowerManagementLimit(h):
    return 700_000


def nvmlDeviceGetMaxClockInfo(h, kind):
    raise NVMLError("Not Supported")


def h100(bus_id: str, uuid: str, memory_gib: int = 80) -> Device:
    return Device("NVIDIA H100 80GB HBM3", uuid, bus_id, memory_gib * 2**30)


def from_fake_gpu(gpu) -> Device:
    """NVML's view of a tests.support.fake_cuda card: its NVML memory, a little over CUDA's."""
    return Device(gpu.name, gpu.uuid, gpu.bus_id, gpu.nvml_memory, (gpu.major, gpu.minor))


def with_mig(device: Device, *slices: tuple[str, str, int, int, int]) -> Device:
    """MIG mode on, with slices (profile, uuid, memory GiB, gpu instance, compute instance)."""
    device.mig_mode = NVML_DEVICE_MIG_ENABLE
    device.migs = [
        Device(f"{device.name} MIG {profile}", uuid, device.bus_id, gib * 2**30, gi=gi, ci=ci, parent=device)
        for profile, uuid, gib, gi, ci in slices
    ]
    return device


def install(devices: list[Device], monkeypatch=None) -> types.ModuleType:
    """This module as `pynvml`, describing `devices` (in NVML's enumeration order)."""
    STATE.update(devices=list(devices), inits=0, calls=[])
    module = sys.modules[__name__]
    if monkeypatch is not None:
        monkeypatch.setitem(sys.modules, "pynvml", module)
    else:
        sys.modules["pynvml"] = module
    return module
