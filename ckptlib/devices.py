"""The device models a prediction is made for: what a GPU's allocator and kernels keep beside the
tensors a step makes. Imports no torch: a budget (advise, plan) reads the context from here."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .units import MIB

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DeviceModel:
    name: str
    dtype_name: str  # torch's name for the dtype weights and activations are in: bfloat16
    allocator_round_bytes: int  # every allocation is rounded up to this
    workspace_bytes: int  # allocator-owned memory outside tensors (cuBLAS workspace): in the peak
    context_bytes: int  # device memory the allocator never sees (CUDA context, kernels): in the fit check only
    flash_attention: bool  # SDPA runs a fused kernel that keeps out + logsumexp, never the score matrix
    foreach_optimizer: bool  # AdamW's multi-tensor path (whole-group temporaries), torch's CUDA default
    asynchronous_copies: bool  # offload copies on streams: the stash in flight and prefetched reloads are live
    # dropout as CUDA's fused kernel: a one-byte mask saved (the CPU kernel saves a scaled noise
    # tensor of the input's dtype, four times that in fp32)
    fused_dropout: bool = False
    host_is_device: bool = False  # the host's tensors (AdamW's step counters) are on the device: a CPU
    # a large allocation holds its whole block (NOTE [ The caching allocator's large blocks ] in ckptlib/memory.py)
    allocator_large_blocks: bool = False

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype_name)

    def assumptions(self) -> list[str]:
        lines = [f"weights and activations in {self.dtype_name}"]
        if self.allocator_round_bytes > 1:
            lines.append(f"each allocation rounded up to {self.allocator_round_bytes} B (caching allocator)")
        if self.allocator_large_blocks:
            lines.append("an allocation over 10 MiB holds its whole 2 MiB-rounded block where 1 MiB or less is left")
        if self.workspace_bytes:
            lines.append(f"{self.workspace_bytes / MIB:.0f} MiB cuBLAS workspace in the peak")
        if self.context_bytes:
            lines.append(
                f"{self.context_bytes / MIB:.0f} MiB CUDA context outside the allocator, counted against the card only"
            )
        lines.append(
            "attention: fused flash/efficient kernel (output + fp32 logsumexp saved, no score matrix)"
            if self.flash_attention
            else "attention: the CPU kernels torch picks for the same call"
        )
        if self.fused_dropout:
            lines.append("dropout: fused kernel (a one-byte mask saved)")
        lines.append("AdamW foreach (multi-tensor) step" if self.foreach_optimizer else "AdamW per-tensor step")
        if self.asynchronous_copies:
            lines.append(
                "activation offload as on CUDA: sources live until their copy is waited on (the stash), "
                "reloads prefetched one region ahead; the host pool is not limited"
            )
        lines.append(
            "peak of a steady-state step (optimizer state and target made first); fragmentation and the allocator's "
            "reserved-but-free memory are not modelled"
        )
        return lines


# torch's CUDA defaults on Hopper: 512 B blocks, a 32 MiB cuBLAS workspace (4096 KiB x 8),
# about 0.5 GiB of context and kernel images per process.
HOPPER = DeviceModel(
    "cuda",
    "bfloat16",
    512,
    32 * MIB,
    512 * MIB,
    flash_attention=True,
    foreach_optimizer=True,
    asynchronous_copies=True,
    fused_dropout=True,
    allocator_large_blocks=True,
)
DEVICE_MODELS = {
    "cuda": HOPPER,
    # Before Hopper (Ampere, Ada: A100, L40S, RTX 4090) torch's default cuBLAS workspace is
    # ":4096:2:16:8", 8.125 MiB; the rest as on Hopper.
    "cuda-pre-hopper": replace(HOPPER, name="cuda-pre-hopper", workspace_bytes=4096 * 2 * 1024 + 16 * 8 * 1024),
    # What the harness measures on CPU: fp32, exact storage bytes, the CPU kernels.
    "cpu": DeviceModel(
        "cpu",
        "float32",
        1,
        0,
        0,
        flash_attention=False,
        foreach_optimizer=False,
        asynchronous_copies=False,
        host_is_device=True,
    ),
}


def device_model(device: str | DeviceModel) -> DeviceModel:
    if isinstance(device, DeviceModel):
        return device
    if device not in DEVICE_MODELS:
        raise ValueError(f"unknown device model {device!r}; known: {', '.join(DEVICE_MODELS)}")
    return DEVICE_MODELS[device]
