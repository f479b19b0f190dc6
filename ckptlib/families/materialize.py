"""Build a diffusers model from a config without downloads and without full-size host copies.

Parameters are created on the meta device with real buffers (accelerate's init_empty_weights, what
from_pretrained(low_cpu_mem_usage=True) uses), then materialised on the target device in the target
dtype (the class's _keep_in_fp32_modules stay fp32), buffers restored, parameters randomly filled.
A plain `to_empty` would wipe registered buffers (position embeddings, rotary tables).

Floating buffers follow from_pretrained(torch_dtype=...): persistent ones (loaded from a checkpoint,
such as SD3's and OmniGen's position embeddings) take the target dtype, unless their module is in
the class's _keep_in_fp32_modules; non-persistent ones (rotary tables computed at construction)
keep the dtype the class gave them.
"""

from __future__ import annotations

import torch
from torch import nn

from ..workload import seeded_generator


def build_on_meta(cls, config: dict, buffers_on_meta: bool = False) -> nn.Module:
    """The model with meta parameters; its buffers real, or with `buffers_on_meta` (a model that will
    live on meta anyway) computed on meta too: SD3.5 Medium's position table alone is 147456 x 1536,
    5 s of CPU time to fill."""
    import contextlib

    from accelerate import init_empty_weights

    on_meta = torch.device("meta") if buffers_on_meta else contextlib.nullcontext()
    with init_empty_weights(include_buffers=False), on_meta:
        return cls(**config)


def _keeps_fp32(model: nn.Module, name: str) -> bool:
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    return any(part in keep for part in name.split("."))


def _buffer_dtype(model: nn.Module, name: str, buffer: torch.Tensor, dtype: torch.dtype) -> torch.dtype:
    module_name, _, attr = name.rpartition(".")
    owner = model.get_submodule(module_name) if module_name else model
    persistent = attr not in owner._non_persistent_buffers_set
    if buffer.is_floating_point() and persistent and not _keeps_fp32(model, name):
        return dtype
    return buffer.dtype


def materialize(model: nn.Module, device: str | torch.device, dtype: torch.dtype, seed: int = 0) -> nn.Module:
    """Meta parameters -> random parameters on `device`; buffers keep their values."""
    buffers = {name: buffer.to(_buffer_dtype(model, name, buffer, dtype)) for name, buffer in model.named_buffers()}
    for name, param in model.named_parameters():  # still on meta: casting costs nothing
        param.data = param.data.to(torch.float32 if _keeps_fp32(model, name) else dtype)
    model.to_empty(device=device)
    for name, buffer in buffers.items():
        module_name, _, attr = name.rpartition(".")
        owner = model.get_submodule(module_name) if module_name else model
        owner._buffers[attr] = buffer.to(device)
    if torch.device(device).type == "meta":  # nothing to fill
        return model
    generator = seeded_generator(device, seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif param.dim() == 1:  # norm scales
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02, generator=generator)
    return model
