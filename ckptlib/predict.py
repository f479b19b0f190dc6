"""Predict a training step's peak device memory without allocating it.

The workload is built on the meta device (shapes, dtypes, strides and storages, no data), the
checkpointing mode is applied, the state a first step leaves (optimizer state, lazy targets:
`Workload.settle`) is made, and one tracked step runs on the meta device under the same live-tensor
tracker the CPU measurement uses (NOTE [ Meta, not fake ]). A 20B-parameter family predicts in
seconds on a laptop.

NOTE [ Meta, not fake ]
FakeTensorMode would let the step run as if on the CPU, but each of its ops costs a Python dispatch
(a cache key, a FakeTensor made) even where the meta kernel is C++ (views, detach: half of a
step's ops). On plain meta tensors those run in C++, and what is left in Python (the reference meta
kernels of pointwise ops, matmuls, norms: 100 to 900 us each) repeats block after block with the
same input metadata: the tracker answers it from a cache (`MetaOpCache`). A shallow Flux.1 dev
step: 1.25 s fake, 0.8 s meta, 0.27 s meta with the cache. What FakeTensor gave for free is said
here instead: the host copies of offloaded tensors are meta too (`HostPool.device`), and the CPU
device model runs the attention kernel the CPU would pick (`_cpu_attention`: on meta, SDPA
decomposes into its math path).

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
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_map, tree_map_only
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from .config import CheckpointConfig
from .devices import DeviceModel, device_model
from .memory import (
    CATEGORIES,
    DEVICE_QUERY,
    LiveTensorTracker,
    plain_tensors,
    step_peak,
    storage_id,
    tensors_in,
    untracked,
)
from .streams import ModelledStreams
from .wiring import apply
from .workload import Workload, adamw_for

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
    work = _meta_workload(work, model)
    # Patched, not a TorchFunctionMode: checkpoint's recompute runs outside torch function modes.
    attention = mock.patch.object(
        F, "scaled_dot_product_attention", _fused_attention if model.flash_attention else _cpu_attention
    )
    dropout = mock.patch.object(F, "dropout", _fused_dropout) if model.fused_dropout else contextlib.nullcontext()
    masks = MasksOnMeta(work.spec.mask_share) if work.spec.mask_share else contextlib.nullcontext()
    host_masks = HostMasksMeetMeta() if work.host_masks else contextlib.nullcontext()
    autocast = mock.patch.object(torch.amp.autocast_mode.autocast, "__init__", _autocast_on_meta)
    with attention, dropout, masks, host_masks, autocast:
        streams = (lambda device: ModelledStreams()) if model.asynchronous_copies else None
        handle = apply(work.model, config, work.spec, streams_for=streams, host_bytes=UNLIMITED_HOST_BYTES)
        with CachedMetaOps():
            work.settle()  # optimizer state and the lazily drawn target exist in every measured step
        _FUSED_ATTENTION_FLOPS[0] = 0
        tracked = ("meta", "cpu") if model.host_is_device else "meta"
        tracker = step_peak(
            work,
            tracked,
            round_to=model.allocator_round_bytes,
            tracker_type=StepCounter,
            large_blocks=model.allocator_large_blocks,
        )
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


class MetaOpCache:
    """What an op returns on the meta device, by its inputs' metadata (NOTE [ Meta, not fake ]).

    Two kinds of op are kept, and only when every tensor they read and return is a plain meta
    tensor. An op that mutates nothing and returns fresh tensors: its outputs are a function of the
    inputs' shapes, strides, dtypes and offsets and of the other arguments, and `empty_strided`
    makes them again. A schema without alias annotations is not enough: `_unsafe_view` returns its
    input's storage unannotated, so an op seen to return an input's storage is never cached again;
    nor is an output that would not be remade exactly (a storage larger than its layout needs, a
    nonzero offset). And an op that writes its first argument in place and returns it (`add_`,
    `mul_`: gradient accumulation, the optimizer's update): on meta it writes nothing, so the answer
    is that argument, once the op was seen to leave its metadata as it was (not `resize_`).
    Autograd's version counters are bumped above the dispatch modes, answered or not."""

    MAX_ENTRIES = 200_000  # about 100 MB; a plan of one family holds a few thousand

    def __init__(self):
        self._entries: dict[tuple, tuple] = {}
        self._kinds: dict[object, str | None] = {}
        self.hits = self.misses = 0

    def key(self, func, args, kwargs) -> tuple | None:
        kind = self._kinds.get(func, ...)
        if kind is ...:
            kind = self._kinds[func] = _kind(func)
        if kind is None:
            return None
        try:
            # a factory op given no dtype reads the default one
            key = (func, torch.get_default_dtype(), _metadata(args), _metadata(tuple(kwargs.items())))
            hash(key)
        except (_NotCacheable, TypeError):  # a real or subclass tensor, or an unhashable argument
            return None
        return key

    def lookup(self, key: tuple, args: tuple):
        """(the op's result, its FLOPs), or None where the cache has not seen it."""
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        layouts, flops, as_tuple = entry
        if layouts is _IN_PLACE:  # as_tuple: whether it returns its first argument
            return (args[0] if as_tuple else None), flops
        outs = tuple(
            None if layout is None else torch.empty_strided(layout[0], layout[1], dtype=layout[2], device="meta")
            for layout in layouts
        )
        return (outs if as_tuple else outs[0]), flops

    def store(self, key: tuple, args: tuple, kwargs: dict, out, flops: int) -> None:
        if self._kinds[key[0]] == _IN_PLACE:
            if (out is args[0] or out is None) and _metadata(args[0]) == key[2][0]:
                self._keep(key, (_IN_PLACE, flops, out is not None))
            else:
                self._kinds[key[0]] = None
            return
        outs = out if isinstance(out, tuple) else (out,)
        inputs = {storage_id(t) for t in tensors_in((args, tuple(kwargs.values())), [])}
        if any(isinstance(o, torch.Tensor) and storage_id(o) in inputs for o in outs):
            self._kinds[key[0]] = None
            return
        layouts = []
        for o in outs:
            if o is None:  # a gradient not asked for (native_layer_norm_backward's output mask)
                layouts.append(None)
                continue
            if type(o) is not torch.Tensor or not o.is_meta or o.storage_offset() != 0:
                return
            remade = torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device="meta")
            if remade.untyped_storage().nbytes() != o.untyped_storage().nbytes():
                return
            layouts.append((o.shape, o.stride(), o.dtype))
        self._keep(key, (tuple(layouts), flops, isinstance(out, tuple)))

    def _keep(self, key: tuple, entry: tuple) -> None:
        if len(self._entries) >= self.MAX_ENTRIES:
            self._entries.clear()
        self._entries[key] = entry


_FRESH, _IN_PLACE = "fresh", "in place"


def _kind(func) -> str | None:
    """Which kind of op MetaOpCache may answer `func` as, if any: one that returns fresh tensors, or
    one that writes the data of its first argument and returns it (`add_`) or nothing (a foreach
    op's list: `_foreach_mul_`), not its layout or storage (`t_`, `set_`, `resize_`)."""
    schema = func._schema
    returns, arguments = schema.returns, schema.arguments
    if returns and not schema.is_mutable:
        return _FRESH if all(r.alias_info is None and str(r.type) == "Tensor" for r in returns) else None
    written = [a.name for a in arguments if a.alias_info is not None and a.alias_info.is_write]
    if not arguments or written != [arguments[0].name] or torch.Tag.inplace_view in func.tags:
        return None
    first = arguments[0].alias_info.before_set
    if not returns or (len(returns) == 1 and returns[0].alias_info and returns[0].alias_info.before_set == first):
        return _IN_PLACE
    return None


class _NotCacheable(Exception):
    pass


def _metadata(value):
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, nn.Parameter) or not value.is_meta:
            raise _NotCacheable
        return (value.shape, value.stride(), value.dtype, value.storage_offset())
    if isinstance(value, (tuple, list)):
        return tuple(_metadata(v) for v in value)
    return value


def _flops(func, args, kwargs, out) -> int:
    """The op's FLOPs where torch has a formula for it (matmuls, convolutions, attention)."""
    formula = flop_registry.get(func._overloadpacket)
    return 0 if formula is None else formula(*args, **kwargs, out_val=out)


# One for the process: a plan's predictions repeat the same blocks at other depths.
META_OPS = MetaOpCache()


class CompilesNothing:
    """First among the bases of a prediction's dispatch modes: a prediction compiles nothing, so their
    `__torch_dispatch__` is not wrapped in torch._disable_dynamo, whose wrapper costs more than a cached
    meta op (TorchDispatchMode._should_skip_dynamo)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class CachedMetaOps(CompilesNothing, TorchDispatchMode):
    """Meta ops answered from `cache` where it has seen them, nothing tracked: the work before a
    prediction's tracked step (`Workload.settle`: a forward for the target and the optimizer's
    first step, which repeat in every prediction of a plan)."""

    def __init__(self, cache: MetaOpCache = META_OPS):
        super().__init__()
        self.cache = cache

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        key = self.cache.key(func, args, kwargs)
        known = None if key is None else self.cache.lookup(key, args)
        if known is not None:
            return known[0]
        out = func(*args, **kwargs)
        if key is not None:
            self.cache.store(key, args, kwargs, out, _flops(func, args, kwargs, out))
        return out


class StepCounter(CompilesNothing, LiveTensorTracker):
    """The live-tensor tracker that also counts the FLOPs of the ops torch has formulas for
    (matmuls, convolutions, attention), recompute included: one dispatch mode, not two, on every op
    of a prediction. Not FlopCounterMode: its module tracker's backward hooks form reference cycles
    that keep autograd nodes, and the activations they save, alive until the garbage collector
    runs, which moves the peak it is measuring. Meta ops it has seen are answered from `cache`."""

    def __init__(self, *args, cache: MetaOpCache | None = META_OPS, **kwargs):
        super().__init__(*args, **kwargs)
        self.flops = 0
        self.cache = cache

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        key = None if self.cache is None else self.cache.key(func, args, kwargs)
        if key is None:
            # not super().__torch_dispatch__: the base class's is wrapped to disable dynamo, whose
            # wrapper costs more than most meta ops (CompilesNothing)
            if func is DEVICE_QUERY:  # NOTE [ Device queries ]
                return args[0].device
            out = func(*args, **kwargs)
            self.observe(func, args, kwargs, out)
            return out
        known = self.cache.lookup(key, args)
        if known is not None:
            out, flops = known
            LiveTensorTracker.observe(self, func, args, kwargs, out)
            self.flops += flops
            return out
        before = self.flops
        out = func(*args, **kwargs)
        self.observe(func, args, kwargs, out)
        self.cache.store(key, args, kwargs, out, self.flops - before)
        return out

    def observe(self, func, args, kwargs, out) -> None:
        super().observe(func, args, kwargs, out)
        self.flops += _flops(func, args, kwargs, out)


class MasksOnMeta(TorchDispatchMode):
    """NOTE [ Boolean masks on meta ]: a boolean index keeps as many elements as the mask has true
    ones, which a meta tensor does not know. A mixture of experts routes each expert's tokens so
    (`y[idx == i] = expert(x[idx == i])`); under balanced routing each keeps `share` of them. This
    mode answers `nonzero` with that count, and turns a boolean index of `index` / `index_put` into
    the positions it would select first (their meta kernels call `nonzero` beneath every mode)."""

    def __init__(self, share: float):
        super().__init__()
        self.share = share

    def _positions(self, mask: torch.Tensor) -> torch.Tensor:
        kept = round(mask.numel() * self.share)
        return torch.empty((kept, mask.dim()), dtype=torch.long, device="meta")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.nonzero.default and args[0].is_meta:
            return self._positions(args[0])
        if func in _INDEX_OPS and any(map(_meta_mask, args[1])):
            indices = []
            for index in args[1]:
                indices += list(self._positions(index).unbind(1)) if _meta_mask(index) else [index]
            args = (args[0], indices, *args[2:])
        return func(*args, **kwargs)


class HostMasksMeetMeta(CompilesNothing, TorchDispatchMode):
    """NOTE [ Inputs read in Python ], continued: a mask the model derives from a host input's
    values is on the CPU too (Qwen Image 2.1 repeats its joint sequence by its layout mask, then
    selects modulation rows by a mask made from the result). An index op takes such a mask beside
    meta tensors; any other op (`where`) mixes no devices: there the mask moves to meta. Only for a
    workload that says its masks meet activations so (Workload.host_masks): the mode costs a Python
    call on every op of a prediction (about 13% more CPU in Lumina2's, whose host input meets none)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in _INDEX_OPS:
            tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
            if any(map(_host_mask, tensors)) and any(t.is_meta for t in tensors):
                args, kwargs = tree_map_only(torch.Tensor, _mask_on_meta, (args, kwargs))
        return func(*args, **kwargs)


def _host_mask(t: torch.Tensor) -> bool:
    return t.dtype == torch.bool and t.dim() > 0 and t.device.type == "cpu"


def _mask_on_meta(t: torch.Tensor) -> torch.Tensor:
    return t.to("meta") if _host_mask(t) else t


def _meta_mask(index: torch.Tensor | None) -> bool:
    return index is not None and index.dtype == torch.bool and index.is_meta


_INDEX_OPS = {
    torch.ops.aten.index.Tensor,
    torch.ops.aten.index_put.default,
    torch.ops.aten.index_put_.default,
    torch.ops.aten._index_put_impl_.default,
}


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


# NOTE [ Inputs read in Python ]: some models read values of an input in Python, not only its
# shape (Lumina2's rotary embedder: `caption_mask.sum(1).tolist()`, the captions' lengths). The meta
# device has no values, so such an input (Workload.host_inputs, a family's `host_inputs`) is built
# on the CPU and kept there in a prediction; what the model computes from its values (lengths,
# padding) is then what a real step computes. It is an input, not an activation: no peak counts it.


def _meta_workload(work: Workload, model: DeviceModel) -> Workload:
    """The same workload with every tensor on the meta device (tied weights stay tied): a real
    tensor a build left in the model (a rotary table some models cache) would not mix with meta
    activations. The optimizer is the device model's."""
    converted: dict[int, torch.Tensor] = {}

    def meta(t):
        if not isinstance(t, torch.Tensor) or _is_meta(t):
            return t
        if id(t) not in converted:
            out = _meta_tensor(t.detach())
            if isinstance(t, nn.Parameter):
                out = nn.Parameter(out, requires_grad=t.requires_grad)
            elif t.requires_grad:
                out.requires_grad_(True)
            converted[id(t)] = out
        return converted[id(t)]

    for module in work.model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                module._parameters[name] = meta(param)
        for name, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[name] = meta(buffer)
        for name, value in vars(module).items():  # plain tensor attributes (rotary tables some models cache)
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                setattr(module, name, meta(value))
    kept = {name: work.kwargs[name] for name in work.host_inputs if name in work.kwargs}
    work.args, work.kwargs = tree_map(meta, (work.args, work.kwargs))
    work.kwargs.update(kept)  # NOTE [ Inputs read in Python ]: values the model reads stay readable
    work.target = meta(work.target)
    work.grad_inputs = tuple(meta(t) for t in work.grad_inputs)
    if work.optimizer is not None:
        work.optimizer = adamw_for(work.model, foreach=model.foreach_optimizer)
    return work


def _is_meta(t: torch.Tensor) -> bool:
    return all(plain.is_meta for plain in plain_tensors(t))


def _meta_tensor(t: torch.Tensor) -> torch.Tensor:
    """`t` on the meta device; a wrapper subclass (a quantized weight: TorchAO's Int8Tensor, SDNQ's
    SDNQTensor) keeps its type around meta inner tensors, so its own ops still run."""
    if is_traceable_wrapper_subclass(t):
        names, context = t.__tensor_flatten__()
        inner = {name: _meta_tensor(getattr(t, name)) for name in names}
        return type(t).__tensor_unflatten__(inner, context, t.size(), t.stride())
    return t.to("meta")


# FLOPs of the fused attention stand-in, which runs no aten op with a FLOP formula.
_FUSED_ATTENTION_FLOPS = [0]


def _fused_attention(query, key, value, attn_mask=None, *_, **__):
    """SDPA as a fused CUDA kernel runs it: the inputs, the output and an fp32 logsumexp per query
    row are saved, the backward allocates the input gradients. Values are not computed."""
    return _FusedAttentionFunction.apply(query, key, value, attn_mask)


_TORCH_SDPA = F.scaled_dot_product_attention
_TORCH_AUTOCAST = torch.amp.autocast_mode.autocast.__init__


def _autocast_on_meta(self, device_type: str, *args, **kwargs):
    """torch.autocast(device_type="meta") as a CPU autocast: meta has no autocast of its own, and a
    model that turns autocast off around its rotary tables (Cosmos 3, ERNIE-Image, Ideogram 4)
    names its inputs' device; no meta op is cast either way."""
    _TORCH_AUTOCAST(self, "cpu" if device_type == "meta" else device_type, *args, **kwargs)


def _cpu_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA as the CPU runs it (NOTE [ Meta, not fake ]): its flash kernel where the CPU's own choice
    picks it, asked of real CPU tensors with the inputs' shapes and no memory (expanded rows), else
    the math path, which is what SDPA on meta runs."""
    with untracked():  # the question's tensors are not the step's
        rows = [torch.zeros(t.shape[-1], dtype=t.dtype).expand(t.shape) for t in (query, key, value)]
        mask = None if attn_mask is None else torch.zeros((), dtype=attn_mask.dtype).expand(attn_mask.shape)
        flash = torch._fused_sdp_choice(*rows, mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if flash == torch.nn.attention.SDPBackend.FLASH_ATTENTION.value:  # GQA included: the kernel takes fewer key heads
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )[0]
    return _TORCH_SDPA(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


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
