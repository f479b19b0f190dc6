"""The GPUs a process may use, as NVML sees them, without initialising CUDA.

NOTE [ Device order ]: CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID;
NVML enumerates them by PCI bus. Cells run with CUDA_DEVICE_ORDER=PCI_BUS_ID (set before CUDA
starts, see `sweep.run.isolation`), so `cuda:N` is the N-th visible device in PCI bus order here too.

CUDA_VISIBLE_DEVICES may name devices by index, by (a prefix of) a `GPU-<uuid>`, by a
`MIG-<uuid>`, or in the legacy `MIG-GPU-<uuid>/<gpu instance>/<compute instance>` form; parsing
stops at the first entry that names nothing, as CUDA's does. A MIG slice reports its own memory.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field


class NvmlUnavailable(RuntimeError):
    """No NVML here (no driver, no GPU, or the library is missing)."""


@dataclass(frozen=True)
class Gpu:
    """One visible device: `cuda:index` in a cell."""

    index: int
    name: str
    uuid: str
    memory_bytes: int | None  # None where NVML cannot tell (a MIG-enabled GPU named by index)
    memory_note: str | None = None  # why memory_bytes is None
    capability: tuple[int, int] | None = None
    driver: str | None = None
    pci_bus_id: str | None = None
    extra: dict = field(default_factory=dict)  # power limit, clocks: where NVML reports them

    @property
    def label(self) -> str:
        """The hardware label runs are keyed by: the card's name without the vendor."""
        return self.name.removeprefix("NVIDIA ")

    def as_dict(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "memory_bytes": self.memory_bytes,
            "memory_note": self.memory_note,
            "capability": list(self.capability) if self.capability else None,
            "driver": self.driver,
            "pci_bus_id": self.pci_bus_id,
            **self.extra,
        }


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextlib.contextmanager
def nvml():
    """The pynvml module, initialised for the block; NvmlUnavailable where there is none."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # noqa: BLE001 - ImportError or any NVMLError: no NVML here
        raise NvmlUnavailable(f"NVML unavailable: {error}") from None
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _physical(pynvml) -> list:
    """Every GPU's handle, in PCI bus order (see NOTE [ Device order ])."""
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    return sorted(handles, key=lambda h: _text(pynvml.nvmlDeviceGetPciInfo(h).busId).lower())


def _mig_enabled(pynvml, handle) -> bool:
    try:
        current, _ = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:  # not a MIG-capable GPU
        return False
    return current == pynvml.NVML_DEVICE_MIG_ENABLE


def _legacy_mig(pynvml, entry: str):
    """`MIG-GPU-<uuid>/<gi>/<ci>`: the parent by UUID, then its slice with those instance ids."""
    parent_uuid, gi, ci = entry.removeprefix("MIG-").split("/")
    parent = pynvml.nvmlDeviceGetHandleByUUID(parent_uuid)
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
        except pynvml.NVMLError:
            continue
        if (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig)) == (int(gi), int(ci)):
            return mig
    raise LookupError(entry)


def _resolve(pynvml, entry: str, physical: list):
    """The NVML handle an entry of CUDA_VISIBLE_DEVICES names; LookupError when it names none."""
    if entry.isdigit():
        if int(entry) >= len(physical):
            raise LookupError(entry)
        return physical[int(entry)]
    if entry.startswith("MIG-") and "/" in entry:
        return _legacy_mig(pynvml, entry)
    if entry.startswith("MIG-"):
        return pynvml.nvmlDeviceGetHandleByUUID(entry)
    if entry.startswith("GPU-"):  # CUDA accepts any unique prefix of a GPU's UUID
        matches = [h for h in physical if _text(pynvml.nvmlDeviceGetUUID(h)).startswith(entry)]
        if len(matches) == 1:
            return matches[0]
    raise LookupError(entry)


def _visible_handles(pynvml, visible: str | None) -> list:
    physical = _physical(pynvml)
    if visible is None:
        return physical
    handles = []
    for entry in (e.strip() for e in visible.split(",")):
        try:
            handles.append(_resolve(pynvml, entry, physical))
        except (LookupError, ValueError, pynvml.NVMLError):
            break  # CUDA stops at the first entry that names no device
    return handles


def _describe(pynvml, index: int, handle) -> Gpu:
    def optional(read):
        try:
            return read()
        except pynvml.NVMLError:
            return None

    memory, note = pynvml.nvmlDeviceGetMemoryInfo(handle).total, None
    is_mig = bool(optional(lambda: pynvml.nvmlDeviceIsMigDeviceHandle(handle)))
    if not is_mig and _mig_enabled(pynvml, handle):
        memory, note = (
            None,
            (
                "the GPU is in MIG mode: CUDA sees one of its slices, not the whole card; name the slice "
                "by its MIG-<uuid> in CUDA_VISIBLE_DEVICES so its own memory can be recorded"
            ),
        )
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle) if is_mig else handle
    capability = optional(lambda: tuple(pynvml.nvmlDeviceGetCudaComputeCapability(parent)))
    extra = {
        key: value
        for key, value in (
            ("power_limit_w", optional(lambda: pynvml.nvmlDeviceGetPowerManagementLimit(parent) / 1000)),
            ("sm_clock_max_mhz", optional(lambda: pynvml.nvmlDeviceGetMaxClockInfo(parent, pynvml.NVML_CLOCK_SM))),
            ("mem_clock_max_mhz", optional(lambda: pynvml.nvmlDeviceGetMaxClockInfo(parent, pynvml.NVML_CLOCK_MEM))),
        )
        if value is not None
    }
    return Gpu(
        index=index,
        name=_text(pynvml.nvmlDeviceGetName(handle)),
        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        memory_bytes=memory,
        memory_note=note,
        capability=capability,
        driver=_text(pynvml.nvmlSystemGetDriverVersion()),
        pci_bus_id=_text(pynvml.nvmlDeviceGetPciInfo(parent).busId),
        extra=extra,
    )


def visible_gpus(visible: str | None = None) -> list[Gpu]:
    """The devices `cuda:0`, `cuda:1`, ... of a process with CUDA_VISIBLE_DEVICES=`visible`
    (default: this process's); NvmlUnavailable where NVML cannot be read."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    with nvml() as pynvml:
        return [_describe(pynvml, i, h) for i, h in enumerate(_visible_handles(pynvml, visible))]


def count() -> int:
    """Visible GPUs; 0 where NVML cannot tell."""
    try:
        return len(visible_gpus())
    except NvmlUnavailable:
        return 0


def device_index(device: str) -> int:
    """`cuda` -> 0, `cuda:2` -> 2; LookupError for a device that is not a GPU (`cpu`, `predicted:cuda`)."""
    kind, _, index = device.partition(":")
    if kind != "cuda":
        raise LookupError(f"{device}: not a CUDA device")
    return int(index or 0)


def gpu_for(device: str) -> Gpu:
    """The visible GPU a `cuda[:N]` device names; NvmlUnavailable or LookupError with the reason."""
    gpus, index = visible_gpus(), device_index(device)
    if index >= len(gpus):
        raise LookupError(
            f"{device}: only {len(gpus)} GPU(s) visible (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
        )
    return gpus[index]
