"""Peak live tensor bytes of one device, for CPU runs where there is no allocator peak counter, and for
predictions on the meta device where nothing is allocated at all.

A TorchDispatchMode sees every tensor an op returns; a weak reference to each new storage subtracts
its bytes when the storage dies (what torch.distributed._tools.mem_tracker does, without its
one-iteration-per-module restriction). The references are the tracker's own, not finalizers: a storage
that outlives the tracker (a weight shared by many predictions) does not keep it alive. Each storage
carries a category, and the split by category is kept at the peak.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import Counter
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    is_traceable_wrapper_subclass,
)
from torch.utils._pytree import tree_leaves

from .units import MIB

_untracked = threading.local()

# What a storage is: tracked before the step (parameters, gradients, optimizer state, inputs) or
# created during it: in the forward (activations: saved for backward or in flight), in the backward
# (temporaries: recomputed activations, gradients in flight), or by the optimizer step.
CATEGORIES = ("parameters", "gradients", "optimizer", "inputs", "activations", "temporaries")

# NOTE [ Device queries ]
# The autograd engine asks every gradient's device from C++; on a tensor subclass that dispatches
# its device (FakeTensor: six in ten of a fake step's ops) the question comes to every dispatch mode
# as prim.device. It allocates nothing, and `.device` answers it without the modes below this one
# (the subclass's own property).
DEVICE_QUERY = torch.ops.prim.device.default


def plain_tensors(tensor: torch.Tensor):
    """The tensors that hold a tensor's memory: itself, or the inner tensors of a wrapper subclass
    (a quantized weight's int8 data and scales, not its logical bf16 size)."""
    if is_traceable_wrapper_subclass(tensor):
        names, _ = tensor.__tensor_flatten__()
        for name in names:
            yield from plain_tensors(getattr(tensor, name))
    else:
        yield tensor


def storage_id(tensor: torch.Tensor) -> int:
    """Which memory a tensor views. Not data_ptr(): meta tensors (predict) all report 0."""
    return tensor.untyped_storage()._cdata


def tensors_in(values, found: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors among an op's arguments or results (nested in tuples and lists), into `found`:
    what tree_leaves gives for them, at a fraction of its cost on every op of a prediction."""
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            tensors_in(value, found)
    return found


@contextlib.contextmanager
def untracked():
    """Allocations in this block are not the compute device's (the offload pool's host buffers)."""
    previous = getattr(_untracked, "active", False)
    _untracked.active = True
    try:
        yield
    finally:
        _untracked.active = previous


# NOTE [ The caching allocator's large blocks ]: CUDA's caching allocator (c10/cuda/CUDACachingAllocator.cpp)
# rounds a request up to 512 B, and serves one over 10 MiB from a segment rounded up to 2 MiB (or a cached
# block of that size, when the same tensors come back each step). It splits a block only where more than
# 1 MiB would be left over (`shouldSplit`: remaining > kSmallSize), so a request whose 2 MiB round-up leaves
# 1 MiB or less holds the whole block, and max_memory_allocated counts it: a 27 MiB activation (PixArt's
# 3 x 4096 tokens x 1152 in bf16) holds 28 MiB. Requests of 1 to 10 MiB are carved from 20 MiB segments,
# where a leftover under 1 MiB is rare and not modelled.
LARGE_REQUEST = 10 * MIB  # kMinLargeAlloc: above it, segments are rounded up to ROUND_LARGE
ROUND_LARGE = 2 * MIB  # kRoundLarge
SPLIT_ABOVE = 1 * MIB  # kSmallSize: a block is split only where more than this is left over


def allocated_bytes(nbytes: int, round_to: int = 1, large_blocks: bool = False) -> int:
    """What an allocator holds for a storage of `nbytes`: rounded up to `round_to`, and with
    `large_blocks` as CUDA's caching allocator holds a large one (NOTE [ The caching allocator's large blocks ])."""
    size = -(-nbytes // round_to) * round_to
    if large_blocks and size > LARGE_REQUEST:
        block = -(-size // ROUND_LARGE) * ROUND_LARGE
        if block - size <= SPLIT_ABOVE:
            return block
    return size


class LiveTensorTracker(TorchDispatchMode):
    """Tracks bytes of live storages on `device` created while active, and their peak.

    Storages that existed before entering (parameters, inputs) are not counted; add them with `track`.
    `round_to` rounds every storage up as an allocator would (the CUDA caching allocator: 512 B), and
    `large_blocks` holds a large one's whole block as that allocator does (allocated_bytes).
    `device` may name several device types: a prediction of a CPU step tracks its meta tensors and
    the real CPU tensors it makes (AdamW's step counters), which a CUDA step keeps off the device.
    """

    def __init__(
        self, device: str | torch.device | tuple[str, ...] = "cpu", round_to: int = 1, large_blocks: bool = False
    ):
        super().__init__()
        self.device_types = {torch.device(d).type for d in (device if isinstance(device, tuple) else (device,))}
        self.round_to = round_to
        self.large_blocks = large_blocks
        self.live_bytes = 0
        self.peak_bytes = 0
        self.live_by_category: Counter = Counter()
        self.peak_by_category: dict[str, int] = {}
        self.phase: str | None = None  # forces the category of new storages (the optimizer step)
        self.stage = "forward"  # where the step is (step_peak names them); each stage's peak is kept
        self.peak_by_stage: dict[str, int] = {}
        self._entries: dict[int, tuple[int, str, weakref.ref]] = {}  # storage id -> (bytes, category, watch)

    def track(self, *tensors: torch.Tensor, category: str = "inputs") -> None:
        for t in tensors:
            for plain in plain_tensors(t):
                self._register(plain, category)

    def recategorize(self, tensor: torch.Tensor, category: str) -> None:
        """A storage turned out to be something else (a gradient the backward produced)."""
        key = storage_id(tensor)
        if key in self._entries:
            size, old, watch = self._entries[key]
            self._entries[key] = (size, category, watch)
            self.live_by_category[old] -= size
            self.live_by_category[category] += size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is DEVICE_QUERY:  # NOTE [ Device queries ]
            return args[0].device
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.observe(func, args, kwargs, out)
        return out

    def observe(self, func, args, kwargs, out) -> None:
        """What an op did: its new storages are registered (a subclass may count more)."""
        if getattr(_untracked, "active", False):
            return
        results = tensors_in((out,), [])
        if results:
            # Views and in-place results share an input's storage: only new storages are allocations.
            inputs = {storage_id(t) for t in tensors_in(kwargs.values(), tensors_in(args, []))}
            category = self.phase or ("temporaries" if torch._C._current_graph_task_id() != -1 else "activations")
            for t in results:
                if storage_id(t) not in inputs:
                    self._register(t, category)

    def _register(self, t: torch.Tensor, category: str) -> None:
        if t.device.type not in self.device_types:
            return
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._entries:
            return
        size = allocated_bytes(storage.nbytes(), self.round_to, self.large_blocks)
        self._entries[key] = (size, category, weakref.ref(storage, lambda _, key=key: self._release(key)))
        self.live_bytes += size
        self.live_by_category[category] += size
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.peak_by_category = dict(self.live_by_category)
        if self.live_bytes > self.peak_by_stage.get(self.stage, 0):
            self.peak_by_stage[self.stage] = self.live_bytes

    def _release(self, key: int) -> None:
        size, category, _ = self._entries.pop(key, (0, None, None))
        self.live_bytes -= size
        if category is not None:
            self.live_by_category[category] -= size


def step_peak(
    work,
    device: str | torch.device | tuple[str, ...] = "cpu",
    round_to: int = 1,
    tracker_type: type[LiveTensorTracker] = LiveTensorTracker,
    large_blocks: bool = False,
) -> LiveTensorTracker:
    """Run one training step of `work` (a Workload) under a tracker (a `tracker_type`) that starts
    from everything already alive (weights, gradients, optimizer state, inputs); it holds the peak.

    The tracker also keeps the peak of each stage of the step: `forward`, `backward` (until a block
    list's first gradient), `backward <block list>` (from its first gradient: backward runs the
    lists last to first) and `optimizer`."""
    with peak_tracked(work, device, round_to, tracker_type, large_blocks) as tracker:
        work.step()
    return tracker


@contextlib.contextmanager
def peak_tracked(
    work,
    device: str | torch.device | tuple[str, ...] = "cpu",
    round_to: int = 1,
    tracker_type: type[LiveTensorTracker] = LiveTensorTracker,
    large_blocks: bool = False,
) -> Iterator[LiveTensorTracker]:
    """step_peak's tracker around a step of `work` that the caller runs (one step: the stages
    follow its forward, backward and optimizer step)."""
    tracker = tracker_type(device, round_to=round_to, large_blocks=large_blocks)
    for category, tensors in _workload_tensors(work).items():
        tracker.track(*tensors, category=category)
    block_list = {id(p): path for path in work.spec.block_lists for p in work.model.get_submodule(path).parameters()}

    def accumulated(p: torch.Tensor) -> None:
        tracker.recategorize(p.grad, "gradients")
        if id(p) in block_list:
            tracker.stage = f"backward {block_list[id(p)]}"

    params = [p for p in work.model.parameters() if p.requires_grad]
    hooks = [p.register_post_accumulate_grad_hook(accumulated) for p in params]
    hooks.append(work.model.register_forward_hook(lambda *_: setattr(tracker, "stage", "backward")))
    if work.optimizer is not None:
        hooks.append(work.optimizer.register_step_pre_hook(lambda *_: _enter_optimizer(tracker)))
        hooks.append(work.optimizer.register_step_post_hook(lambda *_: setattr(tracker, "phase", None)))
    try:
        with tracker:
            yield tracker
    finally:
        for hook in hooks:
            hook.remove()


def _enter_optimizer(tracker: LiveTensorTracker) -> None:
    tracker.phase = tracker.stage = "optimizer"


def _workload_tensors(work) -> dict[str, list[torch.Tensor]]:
    optimizer_state = [
        t
        for s in (work.optimizer.state.values() if work.optimizer else ())
        for t in s.values()
        if isinstance(t, torch.Tensor)
    ]
    params = list(work.model.parameters())
    inputs = [*work.model.buffers(), *tree_leaves((work.args, work.kwargs, work.target))]
    return {
        "parameters": params,
        "gradients": [p.grad for p in params if p.grad is not None],
        "optimizer": optimizer_state,
        "inputs": [t for t in inputs if isinstance(t, torch.Tensor)],
    }
