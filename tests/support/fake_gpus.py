"""The made-up cards of the fake CUDA host (tests/support/fake_cuda.py) and fake NVML
(tests/support/fake_nvml.py). Imports nothing heavy: the fake host's sitecustomize reads them in
every process, and most of those never import torch."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 2**20


@dataclass(frozen=True)
class FakeGpu:
    """What `cudaGetDeviceProperties` says of one card; `nvml_memory` is what NVML says it has."""

    name: str
    uuid: str
    total_memory: int
    nvml_memory: int
    major: int = 9
    minor: int = 0
    multi_processor_count: int = 132
    bus_id: str = "00000000:1B:00.0"

    @property
    def gcnArchName(self) -> str:  # noqa: N802 - torch's attribute name
        return "NVIDIA CUDA"


# Totals read off real cards: torch's (cudaGetDeviceProperties) and NVML's.
H100 = FakeGpu("NVIDIA H100 80GB HBM3", "GPU-11111111-2222-3333-4444-555555555555", 81_080 * MIB, 81_559 * MIB)
H200 = FakeGpu("NVIDIA H200", "GPU-22222222-3333-4444-5555-666666666666", 143_156 * MIB, 143_771 * MIB)
