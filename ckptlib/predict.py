"""Predict a training step's peak device memory without allocating it.

The workload is built on the meta device (no memory), its tensors become fake CPU tensors
(`FakeTensorMode`: shapes, dtypes and aliasing, no data), the checkpointing mode is applied, and
the state a first step leaves (optimizer state, lazy targets: `Workload.settle`) is made, and one
tracked step runs under the same live-tensor tracker the CPU measurement uses. A 20B-parameter
family predicts in seconds on a laptop.

A device model states what the fake CPU run cannot know about the target device: its dtype, the
allocator's rounding, allocator-owned constants (cuBLAS workspace), memory outside the allocator
(CUDA context), which attention kernel runs, and which optimizer implementation.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from .apply import apply
from .config import CheckpointConfig
from .memory import CATEGORIES, LiveTensorTracker, step_peak
from .streams import ModelledStreams
from .units import MIB
from .workload import Workload, adamw_for


@dataclass(frozen=True)
class DeviceModel:
    name: str
    dtype: torch.dtype
    allocator_round_bytes: int  # every allocation is rounded up to this
    workspace_bytes: int  # allocator-owned memory outside tensors (cuBLAS workspace): in the peak
    context_bytes: int  # device memory the allocator never sees (CUDA context, kernels): in the fit check only
    flash_attention: bool  # SDPA runs a fused kernel that keeps out + logsumexp, never the score matrix
    foreach_optimizer: bool  # AdamW's multi-tensor path (whole-group temporaries), torch's CUDA default
    asynchronous_copies: bool  # offload copies on streams: the stash in flight and prefetched reloads are live
    # dropout as CUDA's fused kernel: a one-byte mask saved (the CPU kernel saves a scaled noise
    # tensor of the input's dtype, four times that in fp32)
    fused_dropout: bool = False

    def assumptions(self) -> list[str]:
        lines = [f"weights and activations in {str(self.dtype).removeprefix('torch.')}"]
        if self.allocator_round_bytes > 1:
            lines.append(f"each allocation rounded up to {self.allocator_round_bytes} B (caching allocator)")
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


DEVICE_MODELS = {
    # torch's CUDA defaults on Hopper: 512 B blocks, a 32 MiB cuBLAS workspace (4096 KiB x 8),
    # about 0.5 GiB of context and kernel images per process.
    "cuda": DeviceModel(
        "cuda",
        torch.bfloat16,
        512,
        32 * MIB,
        512 * MIB,
        flash_attention=True,
        foreach_optimizer=True,
        asynchronous_copies=True,
        fused_dropout=True,
    ),
    # Before Hopper (Ampere, Ada: A100, L40S, RTX 4090) torch's default cuBLAS workspace is
    # ":4096:2:16:8", 8.125 MiB; the rest as on Hopper.
    "cuda-pre-hopper": DeviceModel(
        "cuda-pre-hopper",
        torch.bfloat16,
        512,
        4096 * 2 * 1024 + 16 * 8 * 1024,
        512 * MIB,
        flash_attention=True,
        foreach_optimizer=True,
        asynchronous_copies=True,
        fused_dropout=True,
    ),
    # What the harness measures on CPU: fp32, exact storage bytes, the CPU kernels.
    "cpu": DeviceModel(
        "cpu", torch.float32, 1, 0, 0, flash_attention=False, foreach_optimizer=False, asynchronous_copies=False
    ),
}


UNLIMITED_HOST_BYTES = 1 << 62  # the target host's memory is not known: its offload pool is not limited


@dataclass
class Prediction:
    peak_bytes: int  # what max_memory_allocated would report
    breakdown: dict[str, int]  # category -> bytes live at the peak (workspace included as its own entry)
    host_offload_bytes: int  # peak host bytes held by the offload pool
    device: str
    assumptions: list[str]
    seconds: float
    stage_peaks: dict[str, int] = field(default_factory=dict)  # the peak of each stage (memory.step_peak)
    flops: int = 0  # of the tracked step, recompute included (StepCounter; fused attention by formula)
    copied_bytes: int = 0  # offload traffic of the tracked step: device-to-host plus host-to-device
    context_bytes: int = 0
    report: dict = field(default_factory=dict)  # the checkpoint handle's report of the tracked step

    def fits(self, card_bytes: int) -> bool:
        return self.peak_bytes + self.context_bytes <= card_bytes

    def as_dict(self) -> dict:
        return asdict(self)


def device_model(device: str | DeviceModel) -> DeviceModel:
    if isinstance(device, DeviceModel):
        return device
    if device not in DEVICE_MODELS:
        raise ValueError(f"unknown device model {device!r}; known: {', '.join(DEVICE_MODELS)}")
    return DEVICE_MODELS[device]


def predict(
    build: Callable[..., Workload],
    config: CheckpointConfig,
    device: str | DeviceModel = "cuda",
    *,
    keep_blocks: Mapping[str, int] | None = None,
    **build_kwargs,
) -> Prediction:
    """Predicted peak of one training step of `build(**build_kwargs)` under `config` on `device`.

    `build` is a family's build function (preset, training, device, dtype, ... -> Workload).
    `keep_blocks` (block list -> count) keeps only each named list's first blocks: the same model,
    shallower (ckptlib/extrapolate.py extrapolates from such predictions).
    """
    model = device_model(device)
    started = time.perf_counter()
    dtype = build_kwargs.pop("dtype", None) or model.dtype
    work = build(device="meta", dtype=dtype, **build_kwargs)
    if keep_blocks:
        truncate_blocks(work.model, keep_blocks)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    work = _fake_workload(work, mode, model)
    # Patched, not a TorchFunctionMode: checkpoint's recompute runs outside torch function modes.
    attention = (
        mock.patch.object(F, "scaled_dot_product_attention", _fused_attention)
        if model.flash_attention
        else contextlib.nullcontext()
    )
    dropout = mock.patch.object(F, "dropout", _fused_dropout) if model.fused_dropout else contextlib.nullcontext()
    with mode, attention, dropout:
        streams = (lambda device: ModelledStreams()) if model.asynchronous_copies else None
        handle = apply(work.model, config, work.spec, streams_for=streams, host_bytes=UNLIMITED_HOST_BYTES)
        work.settle()  # optimizer state and the lazily drawn target exist in every measured step
        _FUSED_ATTENTION_FLOPS[0] = 0
        tracker = step_peak(work, "cpu", round_to=model.allocator_round_bytes, tracker_type=StepCounter)
    breakdown = {c: tracker.peak_by_category.get(c, 0) for c in CATEGORIES}
    if model.workspace_bytes:
        breakdown["workspace"] = model.workspace_bytes
    report = handle.report
    return Prediction(
        peak_bytes=tracker.peak_bytes + model.workspace_bytes,
        stage_peaks={stage: peak + model.workspace_bytes for stage, peak in tracker.peak_by_stage.items()},
        flops=tracker.flops + _FUSED_ATTENTION_FLOPS[0],
        copied_bytes=report.offload.get("bytes_offloaded", 0) + report.offload.get("bytes_reloaded", 0),
        breakdown=breakdown,
        host_offload_bytes=report.pool.get("peak_held_bytes", 0),
        device=model.name,
        assumptions=model.assumptions(),
        seconds=time.perf_counter() - started,
        context_bytes=model.context_bytes,
        report=report.as_dict(),
    )


class StepCounter(LiveTensorTracker):
    """The live-tensor tracker that also counts the FLOPs of the ops torch has formulas for
    (matmuls, convolutions, attention), recompute included: one dispatch mode, not two, on every op
    of a prediction. Not FlopCounterMode: its module tracker's backward hooks form reference cycles
    that keep autograd nodes, and the activations they save, alive until the garbage collector
    runs, which moves the peak it is measuring."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.flops = 0

    def observe(self, func, args, kwargs, out) -> None:
        super().observe(func, args, kwargs, out)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=out)


def truncate_blocks(model: nn.Module, keep: Mapping[str, int]) -> None:
    """Keep only the first `keep[path]` blocks of each named block list (the model's own loop
    then runs fewer blocks)."""
    for path, count in keep.items():
        blocks = model.get_submodule(path)
        if not 0 < count <= len(blocks):
            raise ValueError(f"cannot keep {count} of the {len(blocks)} blocks of {path!r}")
        parent, _, name = path.rpartition(".")
        kept = [blocks[i] for i in range(count)]
        shorter = nn.ModuleList(kept) if isinstance(blocks, nn.ModuleList) else nn.Sequential(*kept)
        setattr(model.get_submodule(parent), name, shorter)


def _fake_workload(work: Workload, mode: FakeTensorMode, model: DeviceModel) -> Workload:
    """The same workload with every tensor a fake CPU tensor (tied weights stay tied). Real tensors
    left in the model would be converted afresh by each op that reads them, each time a new storage."""
    converted: dict[int, torch.Tensor] = {}

    def fake(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in converted:
            out = _fake_tensor(t.detach(), mode)
            if isinstance(t, nn.Parameter):
                out = nn.Parameter(out, requires_grad=t.requires_grad)
            elif t.requires_grad:
                out.requires_grad_(True)
            converted[id(t)] = out
        return converted[id(t)]

    for module in work.model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                module._parameters[name] = fake(param)
        for name, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[name] = fake(buffer)
        for name, value in vars(module).items():  # plain tensor attributes (rotary tables some models cache)
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                setattr(module, name, fake(value))
    work.args, work.kwargs = tree_map(fake, (work.args, work.kwargs))
    work.target = fake(work.target)
    work.grad_inputs = tuple(fake(t) for t in work.grad_inputs)
    if work.optimizer is not None:
        work.optimizer = adamw_for(work.model, foreach=model.foreach_optimizer)
    return work


def _fake_tensor(t: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor:
    """A fake CPU tensor like `t`; a wrapper subclass (a quantized weight: TorchAO's Int8Tensor,
    SDNQ's SDNQTensor) keeps its type around fake inner tensors, so its own ops still run."""
    if is_traceable_wrapper_subclass(t):
        names, context = t.__tensor_flatten__()
        inner = {name: _fake_tensor(getattr(t, name), mode) for name in names}
        return type(t).__tensor_unflatten__(inner, context, t.size(), t.stride())
    if t.device.type == "meta":
        return mode.fake_tensor_converter.from_meta_and_device(mode, t, torch.device("cpu"))
    return mode.from_tensor(t)


# FLOPs of the fused attention stand-in, which runs no aten op with a FLOP formula.
_FUSED_ATTENTION_FLOPS = [0]


def _fused_attention(query, key, value, attn_mask=None, *_, **__):
    """SDPA as a fused CUDA kernel runs it: the inputs, the output and an fp32 logsumexp per query
    row are saved, the backward allocates the input gradients. Values are not computed."""
    return _FusedAttentionFunction.apply(query, key, value, attn_mask)


def _fused_dropout(input, p=0.5, training=True, inplace=False):
    """Dropout as CUDA runs it (native_dropout: the output and a bool mask, the mask saved)."""
    if not training or p == 0:
        return input
    return torch.native_dropout(input, p, True)[0]


class _FusedAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask):
        _FUSED_ATTENTION_FLOPS[0] += sdpa_flop_count(q.shape, k.shape, v.shape)
        out = q.new_empty((*q.shape[:-1], v.shape[-1]))
        logsumexp = q.new_empty(q.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, logsumexp, *(() if mask is None else (mask,)))
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors[:3]
        _FUSED_ATTENTION_FLOPS[0] += sdpa_backward_flop_count(grad_out.shape, q.shape, k.shape, v.shape)
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), None
