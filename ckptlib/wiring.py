"""Patch a model in place so its own forward runs a checkpointing plan.

A region of N consecutive blocks becomes one checkpoint: the region's first block runs the whole
region inside `torch.utils.checkpoint` and returns the last block's output; the other blocks of
the region pass their input through. The model's forward loop stays unchanged, so any
`x = block(x, ...)` loop (or another convention declared in the BlockSpec) runs the plan.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from .compile import NO_COMPILE, Compiler, wrapped_submodules
from .config import CheckpointConfig
from .host import available_host_bytes
from .memory import storage_id
from .offload import Offloader
from .plan import BlockPlan, plan_lists
from .pool import HostPool
from .spec import FIRST_ARG, BlockSpec, CallConvention, FeedForwardSide, UnsupportedModeError


def _by_name(forward: Callable, args: tuple, kwargs: dict) -> dict:
    signature = inspect.signature(forward)
    bound = signature.bind(*args, **kwargs)
    named = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise UnsupportedModeError(f"cannot pass {name} (*args) of {forward.__qualname__} by name")
        else:
            named[name] = value
    return named


@dataclass
class Report:
    """What the last step actually did (a step starts when the model's forward is called)."""

    backend: str
    plans: dict[str, str]
    regions_run: int = 0
    blocks_recomputed: int = 0
    ffn_regions_run: int = 0
    ffn_recomputed: int = 0
    attention_regions_offloaded: int = 0
    attention_offload_skipped: int = 0  # attention inside a recomputed region keeps nothing to offload
    abandoned_steps: int = 0  # steps so far whose backward never ran (their host buffers were reclaimed)
    offload: dict[str, int] = field(default_factory=dict)
    pool: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# NOTE [ Attention offload inside a region ]
# SimpleTuner's gradient_checkpointing_offload_attention puts its offload hooks around the attention
# call inside the block, so inside a checkpointed region they are the innermost saved-tensor hooks
# and take the attention's saved tensors from the checkpoint: in forward, what autograd made goes
# to the host and what needs no gradient (a LoRA dropout mask, softmax statistics) stays on the
# device, both held by the forward's graph until the attention's backward, which reloads them.
# In recompute the hooks take the recomputed attention's tensors again (SimpleTuner copies them out
# a second time; here they are dropped: the recompute's graph never runs backward, and a tensor kept
# as itself would hold its own grad_fn in a cycle only the garbage collector frees): the forward's
# graph already holds what the attention's backward unpacks, and checkpoint, which never saw those
# tensors, counts the same tensors in both passes. So every recomputed block keeps its
# attention's no-grad tensors on the device for the whole step: Wan 2.1 14B's LoRA dropout masks
# alone are about 20 GiB at 480p, 81 frames, which is why the docs' activation-offload peaks sit
# above `layer`.


def _around(scope: str, hooks: Callable[[], contextlib.AbstractContextManager]) -> contextlib.AbstractContextManager:
    """`hooks` around an attention's call, or with scope "kernel" around each scaled-dot-product
    attention call inside it (diffusers' dispatch looks the function up at each call)."""
    return _around_kernel(hooks) if scope == "kernel" else hooks()


@contextlib.contextmanager
def _around_kernel(hooks: Callable[[], contextlib.AbstractContextManager]):
    kernel = F.scaled_dot_product_attention

    @functools.wraps(kernel)
    def hooked(*args, **kwargs):
        with hooks():
            return kernel(*args, **kwargs)

    F.scaled_dot_product_attention = hooked
    try:
        yield
    finally:
        F.scaled_dot_product_attention = kernel


def _dropped(tensor: torch.Tensor) -> None:
    return None


def _never_unpacked(_) -> torch.Tensor:
    raise RuntimeError("a recomputed attention's saved tensor was used: only the forward's graph runs backward")


def _recomputing() -> bool:
    # Non-reentrant checkpoint recomputes inside the backward graph task.
    return torch._C._current_graph_task_id() != -1


class CheckpointHandle:
    def __init__(
        self,
        model: nn.Module,
        config: CheckpointConfig,
        plans: dict[str, BlockPlan],
        offloader: Offloader | None,
        compiler: Compiler = NO_COMPILE,
    ):
        self.model = model
        self.config = config
        self.compiler = compiler
        self.plans = plans
        self._offloader = offloader
        self._patched: list[tuple[nn.Module, Any]] = []
        self._hooks: list[Any] = []
        self._pending_passthrough: set[int] = set()
        self.attention_offload_skipped = 0
        self._counters = self._fresh_report()

    @property
    def report(self) -> Report:
        report = Report(**{k: v for k, v in vars(self._counters).items()})
        if self._offloader is not None:
            report.offload = asdict(self._offloader.counters)
            report.pool = self._offloader.pool.stats.as_dict()
            report.abandoned_steps = self._offloader.abandoned_steps
        return report

    def start_step(self) -> None:
        self._counters = self._fresh_report()
        if self._offloader is not None:
            self._offloader.reset_step()  # first: it may reclaim buffers of a step without backward
            self._offloader.keep = {storage_id(t) for t in (*self.model.parameters(), *self.model.buffers())}
            self._offloader.pool.stats.reset_step()

    def remove(self) -> None:
        """Restore every patched forward; the model is as it was before apply."""
        for module, previous in reversed(self._patched):
            if previous is None:
                del module.forward
            else:
                module.forward = previous
        self._patched.clear()
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        if self._offloader is not None:
            self._offloader.pool.clear()

    def _fresh_report(self) -> Report:
        return Report(
            backend=self.config.backend,
            plans={name: str(p) for name, p in self.plans.items()},
            attention_offload_skipped=self.attention_offload_skipped,
        )

    def _patch(self, module: nn.Module, forward: Callable) -> None:
        self._patched.append((module, module.__dict__.get("forward")))
        module.forward = forward

    def _wrap(self, module: nn.Module, wrapper: Callable) -> None:
        """Patch in one of the wrappers below (NOTE [ Compiled compute, eager checkpointing ])."""
        self._patch(module, self.compiler.eager(wrapper))

    def _checkpointed(self, fn: Callable, offload: bool, args: tuple, kwargs: dict, carried: tuple | None = None):
        # Keyword tensors go in positionally: checkpoint saves (and the offload hook sees) only
        # positional tensors; keyword ones would be kept alive by the closure instead.
        names, count = list(kwargs), len(args)

        # `run` becomes checkpoint's recompute function: it must not close over the inputs themselves,
        # or they stay alive for the whole step and offloading them frees nothing.
        def run(*values):
            return fn(*values[:count], **dict(zip(names, values[count:])))

        # Offload the state the region carries, not the extras every block shares (time embeddings,
        # rotary tables, text states): those stay alive in the model's forward anyway.
        nothing = contextlib.nullcontext()
        with self._offloader.only(carried) if offload else nothing, self._offloader.hooks() if offload else nothing:
            return checkpoint(run, *args, *kwargs.values(), use_reentrant=False, preserve_rng_state=True)

    def region_forward(
        self, blocks: list[nn.Module], originals: list[Callable], convention: CallConvention
    ) -> Callable:
        def run_blocks(*args, **kwargs):
            recomputing = _recomputing()
            for i, forward in enumerate(originals):
                if recomputing:
                    self._counters.blocks_recomputed += 1
                out = forward(*args, **kwargs)
                if i + 1 < len(originals):
                    args, kwargs = convention.next_inputs(out, args, kwargs)
            return out

        def forward(*args, **kwargs):
            if not torch.is_grad_enabled():  # nothing to save: every block runs as itself
                return originals[0](*args, **kwargs)
            if convention.by_name:
                args, kwargs = (), _by_name(originals[0], args, kwargs)
            self._counters.regions_run += 1
            self._pending_passthrough.update(id(b) for b in blocks[1:])
            carried = convention.carried(args, kwargs) if convention.carried else None
            return self._checkpointed(run_blocks, self.config.offloads_regions, args, kwargs, carried)

        return forward

    def passthrough_forward(self, block: nn.Module, convention: CallConvention, original: Callable) -> Callable:
        def forward(*args, **kwargs):
            if not torch.is_grad_enabled():
                return original(*args, **kwargs)
            if id(block) not in self._pending_passthrough:
                raise RuntimeError(
                    "a block inside a checkpointed region was called without its region's first block; "
                    "grouped regions need the model to call its blocks in order"
                )
            self._pending_passthrough.discard(id(block))
            if convention.by_name:
                args, kwargs = (), _by_name(original, args, kwargs)
            return convention.passthrough(args, kwargs)

        return forward

    def ffn_forward(self, original: Callable) -> Callable:
        def run_ffn(*args, **kwargs):
            if _recomputing():
                self._counters.ffn_recomputed += 1
            return original(*args, **kwargs)

        def forward(*args, **kwargs):
            if not torch.is_grad_enabled():
                return original(*args, **kwargs)
            self._counters.ffn_regions_run += 1
            return self._checkpointed(run_ffn, self.config.offloads_regions, args, kwargs)

        return forward

    def side_forward(self, block: nn.Module, side: FeedForwardSide) -> Callable:
        """The block's forward with its feed-forward side checkpointed as an FFN region (each side
        function compiled once under a compile mode; the rest of the forward runs eagerly)."""
        regions: dict[Callable, Callable] = {}

        def run_side(fn: Callable, *tensors):
            if fn not in regions:
                regions[fn] = self.ffn_forward(self.compiler.compute(functools.partial(fn, block)))
            return regions[fn](*tensors)

        return functools.partial(side.forward, block, run_side)

    def attention_forward(self, original: Callable) -> Callable:
        grad_only = self.config.offload_attention_in_regions  # SimpleTuner's pack rule, wherever it runs
        scope = self.config.attention_offload_scope

        def forward(*args, **kwargs):
            if not torch.is_grad_enabled():
                return original(*args, **kwargs)
            if _recomputing():  # NOTE [ Attention offload inside a region ]
                with _around(scope, lambda: saved_tensors_hooks(_dropped, _never_unpacked)):
                    return original(*args, **kwargs)
            self._counters.attention_regions_offloaded += 1
            with _around(scope, lambda: self._offloader.hooks(grad_only)):
                return original(*args, **kwargs)

        return forward


def apply(
    model: nn.Module,
    config: CheckpointConfig,
    spec: BlockSpec,
    *,
    streams_for: Callable | None = None,
    host_bytes: int | None = None,
    compile: str | Compiler = "none",
) -> CheckpointHandle:
    """Patch `model` to run `config`'s plan on every block list of `spec`; returns the handle to undo it.

    `compile` (ckptlib/compile.py: none | regional | full, or a `Compiler` naming torch.compile's
    backend too) compiles the blocks' compute under the plan; the plan's own wrappers stay eager.

    `streams_for(device)` gives the offloader its streams (ckptlib/streams.py; the predictor passes
    a model of CUDA's), by default the device's own. `host_bytes` is the host memory the offload
    pool may take `config.host_memory_share` of, by default what this host has available."""
    compiler = compile if isinstance(compile, Compiler) else Compiler(compile)
    block_lists = {path: _block_list(model, path, spec) for path in spec.block_lists}
    _check_supported(config, spec, block_lists)
    device_type = next(model.parameters()).device.type
    if reason := compiler.unavailable(device_type):
        raise UnsupportedModeError(f"compile {compiler.mode}: {reason}")
    if compiler.compiles and config.offload_attention_in_regions:
        raise UnsupportedModeError(
            f"compile {compiler.mode}: attention offload inside recomputed regions does not run compiled "
            "(its hooks would sit inside the compiled block); seg2-stride4-offload-plain offloads in plain blocks"
        )
    if compiler.compiles and config.offload_attention and config.attention_offload_scope == "kernel":
        raise UnsupportedModeError(
            f"compile {compiler.mode}: attention offload around the kernel does not run compiled (its hooks would sit "
            "inside the compiled attention); mode.attention_offload_scope=module offloads the whole attention"
        )
    try:
        plans = plan_lists({path: len(blocks) for path, blocks in block_lists.items()}, config)
    except ValueError as error:
        raise UnsupportedModeError(f"{spec.name}: {error}") from None
    offloader = None
    if config.uses_offload:
        # Pinned host memory only speeds copies from a GPU: pinning follows the model's device, not the host.
        on_gpu = any(p.device.type == "cuda" for p in model.parameters())
        host = available_host_bytes() if host_bytes is None else host_bytes
        limit = None if host is None else int(config.host_memory_share * host)  # unknown host: no limit
        host_device = "meta" if any(p.is_meta for p in model.parameters()) else "cpu"  # a prediction's host copies
        pool = HostPool(config.pin_memory_max_buckets, pin=on_gpu, limit_bytes=limit, device=host_device)
        offloader = Offloader(
            pool,
            config.min_offload_bytes,
            stash_depth=config.offload_stash_depth,
            prefetch=config.offload_prefetch,
            streams_for=streams_for,
        )
    handle = CheckpointHandle(model, config, plans, offloader, compiler)
    try:
        for path, blocks in block_lists.items():
            _apply_plan(handle, config, spec, path, blocks, plans[path])
        if compiler.mode == "full":
            handle._patch(model, compiler.compute(model.forward))
        handle._hooks.append(model.register_forward_pre_hook(lambda *_: handle.start_step()))
    except BaseException:
        handle.remove()
        raise
    handle.start_step()  # the report carries what was decided at apply time
    return handle


def _block_list(model: nn.Module, path: str, spec: BlockSpec) -> nn.ModuleList:
    try:
        blocks = model.get_submodule(path)
    except AttributeError as error:
        raise UnsupportedModeError(f"{spec.name}: no block list {path!r} ({error})") from None
    if not isinstance(blocks, (nn.ModuleList, nn.Sequential)):
        raise UnsupportedModeError(f"{spec.name}: {path!r} is a {type(blocks).__name__}, not a list of blocks")
    return blocks


def _check_supported(config: CheckpointConfig, spec: BlockSpec, block_lists: dict[str, nn.ModuleList]) -> None:
    if config.ffn_only and not spec.feed_forward:
        reason = spec.reasons.get("feed_forward", "the model declares no feed-forward boundary")
        raise UnsupportedModeError(f"{spec.name}: backend {config.backend} unsupported: {reason}")
    if config.offload_attention and not spec.attention:
        reason = spec.reasons.get("attention", "the model declares no attention submodules")
        raise UnsupportedModeError(f"{spec.name}: offload_attention unsupported: {reason}")
    # NOTE [ A mode never does nothing silently ]: a name the mode relies on that matches no block
    # would leave the mode a no-op recorded as if it ran; it is unsupported, naming what is there.
    needed = {"feed_forward": config.ffn_only, "attention": config.offload_attention}
    for kind, names in (("feed_forward", spec.feed_forward), ("attention", spec.attention)):
        blocks = [b for bs in block_lists.values() for b in bs]
        if kind == "feed_forward" and any(_side(b, config, spec) for b in blocks):
            continue
        if needed[kind] and not any(find_submodules(b, names) for b in blocks):
            raise UnsupportedModeError(f"{spec.name}: {unmatched(kind, names, block_lists)}")
    if (config.interval or 1) > 1 and not config.ffn_only and config.regions == "segments":
        ungroupable = [p for p in block_lists if spec.convention(p) is None]
        if ungroupable:
            raise UnsupportedModeError(
                f"{spec.name}: interval {config.interval} needs grouped regions, and block list(s) "
                f"{', '.join(ungroupable)} cannot be grouped"
            )


def unmatched(kind: str, names: Sequence[str], block_lists: dict[str, nn.ModuleList]) -> str:
    """One line: the spec's `kind` names match no submodule of any block, and what a block has."""
    shown = {
        path: ", ".join(name for name, _ in blocks[0].named_children())
        for path, blocks in block_lists.items()
        if len(blocks)
    }
    has = "; ".join(f"a block of {path!r} has {children}" for path, children in shown.items())
    return f"{kind} {', '.join(map(repr, names))} matches no submodule of any block ({has})"


def spec_problems(model: nn.Module, spec: BlockSpec) -> list[str]:
    """Every name `spec` gives that names nothing in `model`, one line each (a builder's spec is
    checked with these before any cell runs): a block list that is not there, attention or
    feed-forward names that match no block of any list."""
    problems, block_lists = [], {}
    for path in spec.block_lists:
        try:
            block_lists[path] = _block_list(model, path, spec)
        except UnsupportedModeError as error:
            problems.append(str(error))
    named = (
        ("feed_forward", spec.feed_forward),
        ("attention", spec.attention),
        ("cross_attention", spec.cross_attention),
    )
    for kind, names in named:
        if block_lists and names and not any(find_submodules(b, names) for bs in block_lists.values() for b in bs):
            problems.append(f"{spec.name}: {unmatched(kind, names, block_lists)}")
    return problems


def _side(block: nn.Module, config: CheckpointConfig, spec: BlockSpec) -> FeedForwardSide | None:
    """The block's feed-forward side, where the config's scope takes sides and its class has one."""
    return spec.ffn_sides.get(type(block).__name__) if config.ffn_scope == "side" else None


def find_submodules(block: nn.Module, names: Sequence[str]) -> list[nn.Module]:
    """Submodules of a block by path; `*` matches any one path part (`transformer_blocks.*.attn1`)."""
    found = []
    for name in names:
        if "*" in name:
            pattern = re.compile(re.escape(name).replace(r"\*", r"[^.]+") + "$")
            found += [m for path, m in block.named_modules() if pattern.match(path)]
            continue
        try:
            found.append(block.get_submodule(name))
        except AttributeError:
            continue
    return found


def _apply_plan(
    handle: CheckpointHandle,
    config: CheckpointConfig,
    spec: BlockSpec,
    path: str,
    blocks: nn.ModuleList,
    block_plan: BlockPlan,
) -> None:
    compute = handle.compiler.compute
    whole_block = config.checkpoints and not config.ffn_only
    in_regions = set()
    if whole_block:
        convention = spec.convention(path) or FIRST_ARG  # None only reaches here for single-block regions
        for region in block_plan.regions:
            members = [blocks[i] for i in region]
            originals = [compute(m.forward) for m in members]
            handle._wrap(members[0], handle.region_forward(members, originals, convention))
            for member, original in zip(members[1:], originals[1:]):
                handle._wrap(member, handle.passthrough_forward(member, convention, original))
            in_regions.update(region)
    sided = set()
    if config.ffn_only:
        for i in block_plan.checkpointed_blocks:
            side = _side(blocks[i], config, spec)
            if side is not None:
                handle._wrap(blocks[i], handle.side_forward(blocks[i], side))
                sided.add(i)
                continue
            for ffn in find_submodules(blocks[i], spec.feed_forward):
                handle._wrap(ffn, handle.ffn_forward(compute(ffn.forward)))
    if config.offload_attention:
        recomputed = set(block_plan.checkpointed_blocks) if whole_block else set()
        for i, block in enumerate(blocks):
            attention = find_submodules(block, spec.offloaded_attention(config.attention_offload_scope))
            if i in recomputed and not config.offload_attention_in_regions:
                handle.attention_offload_skipped += len(attention)
                continue
            for module in attention:
                handle._wrap(module, handle.attention_forward(compute(module.forward)))
    if handle.compiler.compiles:  # the blocks no region runs (NOTE [ One code object per block variant ])
        for i, block in enumerate(blocks):
            wrapped = wrapped_submodules(block)
            if i not in in_regions | sided and (handle.compiler.mode == "regional" or wrapped):
                handle._patch(block, compute(block.forward, wrapped))
