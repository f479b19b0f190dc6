"""Tasks the acceptance checks run in a cell's child process (from the fork server)."""

from __future__ import annotations

from sweep.store.results import CellResult
from sweep.vocabulary import Status


def _bare(uuid: str) -> str:
    return str(uuid).removeprefix("GPU-").removeprefix("MIG-").lower()


def fork_probe(device: str) -> CellResult:
    """The state CUDA is in when a child starts (before it touches CUDA), then a real allocation,
    and the device's identity from torch beside NVML's."""
    import torch

    from sweep.machine import gpus

    report = {"initialized_at_start": torch.cuda.is_initialized(), "bad_fork_at_start": torch.cuda._is_in_bad_fork()}
    x = torch.ones(1024, device=device)
    report["allocated"] = float(x.sum()) == 1024.0
    if device.startswith("cuda"):
        properties = torch.cuda.get_device_properties(torch.device(device))
        nvml = gpus.gpu_for(device)
        report.update(
            torch_uuid=_bare(properties.uuid),
            nvml_uuid=_bare(nvml.uuid),
            torch_name=properties.name,
            nvml_name=nvml.name,
            torch_memory=properties.total_memory,
            nvml_memory=nvml.memory_bytes,
        )
    return CellResult(Status.OK, report=report)
