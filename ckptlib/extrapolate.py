"""Full-depth predictions from shallow ones: the same model with fewer blocks per list.

NOTE [ Affine in depth ]
A block list is a stack of identical blocks. Each block of one role (plain, or inside the schedule's
pattern) adds the same weights, gradients, optimizer state, saved activations, FLOPs and offload
traffic, and the step's peak falls at the same point of the step (the start of backward, or the
recompute of the region backward reaches first) however deep the stack. So the peak, the FLOPs and
the copied bytes are affine in the number of periods of the pattern on each list, as long as the
tail (the blocks after the last whole period) stays the same. A list of N blocks under a pattern of
period p is therefore predicted at depth b = w p + N mod p (w warm periods, `_warm_periods`, a
remainder's own region standing for one of them) and at b + p, every other list at its own b, and
the difference extrapolated to N. Only schedules that are uniform per list extrapolate this
way: the pattern on the first lists, plain blocks on the rest (`layered`). The planner interpolates
between those for a cut inside a list. `check` compares an extrapolation with the full prediction.

NOTE [ A period's share is the same in every layout ]
What one more period of the pattern adds is its weights, their gradients and optimizer state, and
the region inputs it saves, all alive from its forward to its backward, so inside the peak of every
stage, wherever that peak falls: a list's head slope is taken once per pattern and reused in every
layout (a two-list family then needs 10 shallow predictions per pattern, not 14). A plain block's
slope is not shared: its activations are freed as backward passes it, and whether they are still
alive at a stage's peak depends on what the other lists hold (Flux.1 dev's single blocks under
torch interval 2 with attention offload: 570, 388 or 276 MiB per block in the three layouts).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import torch

from .config import CheckpointConfig
from .devices import DeviceModel, device_model
from .memory import allocated_bytes, plain_tensors, storage_id
from .predict import Prediction, predict, truncate_blocks
from .quantize import is_quantized
from .workload import Workload


@dataclass(frozen=True)
class Estimate:
    """What the planner needs of one schedule: its predicted peak (the largest of its stages'
    peaks), work and offload traffic."""

    stage_peaks: dict[str, int]
    flops: int
    copied_bytes: int
    host_offload_bytes: int
    context_bytes: int = 0
    predictions: int = 0  # shallow predictions it took (0: all were cached)

    @property
    def peak_bytes(self) -> int:
        return max(self.stage_peaks.values())

    @classmethod
    def of(cls, prediction: Prediction) -> Estimate:
        return cls(
            dict(prediction.stage_peaks),
            prediction.flops,
            prediction.copied_bytes,
            prediction.host_offload_bytes,
            prediction.context_bytes,
        )

    def fits(self, card_bytes: int) -> bool:
        return self.peak_bytes + self.context_bytes <= card_bytes

    def quantities(self) -> dict[str, int]:
        return {
            **{f"stage {name}": peak for name, peak in self.stage_peaks.items()},
            "flops": self.flops,
            "copied_bytes": self.copied_bytes,
            "host_offload_bytes": self.host_offload_bytes,
        }

    @classmethod
    def from_quantities(cls, values: dict[str, float], context_bytes: int, predictions: int = 0) -> Estimate:
        stages = {k.removeprefix("stage "): round(v) for k, v in values.items() if k.startswith("stage ")}
        return cls(
            stages,
            round(values["flops"]),
            round(values["copied_bytes"]),
            round(values["host_offload_bytes"]),
            context_bytes,
            predictions,
        )

    def blend(self, other: Estimate, share: float) -> Estimate:
        """The point `share` of the way from this estimate to `other`: each stage's peak, the FLOPs
        and the copies linearly (so the peak, their maximum, is convex between the two)."""
        a, b = self.quantities(), other.quantities()
        return Estimate.from_quantities({k: a[k] + (b[k] - a[k]) * share for k in a}, self.context_bytes)


def period(config: CheckpointConfig) -> int:
    """Blocks after which a list's pattern repeats."""
    return (config.stride or config.interval or 1) if config.checkpoints else 1


PLAIN_BASE = 2  # plain blocks of a shallow list (one block per list moves the peak's moment)


def _warm_periods(config: CheckpointConfig, quantized: bool) -> int:
    """Whole periods a shallow list needs before each further one adds the same (NOTE [ Affine in
    depth ]): two (a list of one region moves the peak's moment; so does a strided list of one period:
    Wan 2.1 14B's interval 2 stride 4 was 2.1% off from one), and for offloaded
    regions enough to fill the stash of copies in flight past the first region (unsloth does not
    offload it: it is the model's own input). A quantized base needs one more: its matmuls save a
    dequantized weight for the input's gradient, which the model's first block (its input needs
    none) does not, so a backward stage that reaches the first block peaks lower until two others
    follow it."""
    warm = config.offload_stash_depth + 1 if config.offloads_regions else 2
    return warm + quantized


def _grows_within(base: tuple[int, int], target: tuple[int, int], repeat: int) -> bool:
    """Whether every layout grown from `base` toward `target` is shallower than the target's list."""
    (head, tail), (to_head, to_tail) = base, target
    growth = max(repeat if to_head > head else 0, 1 if to_tail > tail else 0)
    return head + tail + growth <= to_head + to_tail and head + tail < to_head + to_tail


class ShallowPredictor:
    """Predictions of one workload (built once on the meta device) at any depth, cached."""

    def __init__(self, build: Callable[..., Workload], device: str | DeviceModel = "cuda", **build_kwargs):
        self.device = device_model(device)
        dtype = build_kwargs.pop("dtype", None) or self.device.dtype
        self._dtype = dtype
        self._meta = build(device="meta", dtype=dtype, **build_kwargs)
        self._quantized = is_quantized(self._meta.model)
        self.sizes = {path: len(self._meta.model.get_submodule(path)) for path in self._meta.spec.block_lists}
        self._cache: dict[tuple, Prediction] = {}
        self._head_slopes: dict[tuple[CheckpointConfig, int], dict[str, int]] = {}
        self.predictions = 0
        self._draw_target_once()

    def _draw_target_once(self) -> None:
        """The step's target has the output's shape at any depth: drawn once on a one-block copy,
        it spares every prediction the forward that would draw it (a quarter of its time)."""
        if self._meta.target is None:
            probe = self._copy(dict.fromkeys(self.sizes, 1))()
            predict(lambda **_: probe, CheckpointConfig("none"), self.device, dtype=self._dtype)
            self._meta.target = torch.empty(probe.target.shape, dtype=probe.target.dtype, device="meta")

    @property
    def ffn_scope(self) -> str:
        """What the FFN-only backends recompute in this model (ckptlib.config.FFN_SCOPES): its
        feed-forward sides where its spec declares them (as its trainer wires them)."""
        return "side" if self._meta.spec.ffn_sides else "modules"

    @property
    def weight_bytes(self) -> int:
        """The device bytes of the model's weights, LoRA adapters included, as the allocator rounds
        them: alive through every stage of every step, a floor under any schedule's peak."""
        storages = {
            storage_id(plain): plain.untyped_storage().nbytes()
            for p in self._meta.model.parameters()
            for plain in plain_tensors(p)
        }
        device = self.device
        return sum(
            allocated_bytes(size, device.allocator_round_bytes, device.allocator_large_blocks)
            for size in storages.values()
        )

    def predict(self, config: CheckpointConfig, depths: Mapping[str, int] | None = None) -> Prediction:
        """The prediction at `depths` (block list -> blocks kept; None: the whole model)."""
        depths = dict(self.sizes if depths is None else depths)
        key = (config, tuple(sorted(depths.items())))
        if key not in self._cache:
            self._cache[key] = predict(self._copy(depths), config, self.device, dtype=self._dtype)
            self.predictions += 1
        return self._cache[key]

    def layered(self, config: CheckpointConfig, pattern_lists: int | None = None) -> Estimate:
        """The full-depth estimate of `config`'s pattern on the first `pattern_lists` block lists
        (None: all of them) and plain blocks on the rest (NOTE [ Affine in depth ])."""
        count = len(self.sizes) if pattern_lists is None else pattern_lists
        sizes = list(self.sizes.values())
        base = [self._head_base(config, n) if i < count else (0, PLAIN_BASE) for i, n in enumerate(sizes)]
        target = [(n, 0) if i < count else (0, n) for i, n in enumerate(sizes)]
        return self._extrapolated(config, base, target)

    def cut(self, config: CheckpointConfig, index: int) -> dict[int, Estimate]:
        """Estimates of the pattern on the lists before `index` and on the first h blocks of list
        `index` (the rest plain), for each h a whole number of periods from the warm depth on: the
        head and the plain tail each grow by their own step (NOTE [ Affine in depth ])."""
        sizes = list(self.sizes.values())
        repeat = period(config)
        warm = _warm_periods(config, self._quantized) * repeat
        base = [self._head_base(config, n) for n in sizes[:index]]
        base += [(warm, PLAIN_BASE)] + [(0, PLAIN_BASE)] * (len(sizes) - index - 1)
        found = {}
        for head in range(warm, sizes[index], repeat):
            target = [(n, 0) for n in sizes[:index]]
            target += [(head, sizes[index] - head)] + [(0, n) for n in sizes[index + 1 :]]
            found[head] = self._extrapolated(config, base, target)
        return found

    def _head_base(self, config: CheckpointConfig, size: int) -> tuple[int, int]:
        """A whole list under the pattern, shallow: its warm periods and the full list's remainder.
        A remainder starts a region (a period's first block is checkpointed), so where one is left
        it stands for one of the warm periods unless regions are offloaded (the stash counts
        copies): the warm periods count regions, and the remainder's is the list's own last one.
        Flux.1 dev's 19 double and 38 single blocks under interval 2 stride 4 are predicted at 7
        and 6 blocks, not 11 and 10 (a fifth less time): every whole-list estimate of its plan,
        with or without a quantized base, is unchanged; one cut moved, by -0.19% of its full
        prediction."""
        repeat = period(config)
        remainder = size % repeat
        warm = _warm_periods(config, self._quantized) - (remainder > 0 and not config.offloads_regions)
        return (min(size, warm * repeat + remainder), 0)

    def _extrapolated(self, config: CheckpointConfig, base: list[tuple[int, int]], target: list[tuple[int, int]]):
        """From the shallow layout `base` to `target` ((head, plain tail) per list): one prediction
        at the base, and one per list and direction that grows (a period of head, a block of tail)."""
        before = self.predictions
        # a list too short to grow from its base (a grown layout must fit in it) is predicted as it
        # is, not extrapolated
        base = [b if _grows_within(b, t, period(config)) else t for b, t in zip(base, target)]
        estimate = self._at_layout(config, base)
        totals = dict(estimate.quantities())
        for i, ((head, tail), (to_head, to_tail)) in enumerate(zip(base, target)):
            grown_head = (to_head - head) // period(config)
            if grown_head:
                self._add(totals, grown_head, self._head_slope(config, base, i, estimate))
            if to_tail != tail:  # a tail shorter than the base's extrapolates back
                self._add(totals, to_tail - tail, self._slope(config, base, i, (head, tail + 1), estimate))
        return Estimate.from_quantities(totals, estimate.context_bytes, self.predictions - before)

    def _head_slope(self, config: CheckpointConfig, base: list[tuple[int, int]], index: int, at_base: Estimate):
        """What a period of the pattern adds to list `index`: taken at the first layout that asks
        (NOTE [ A period's share is the same in every layout ])."""
        key = (config, index)
        if key not in self._head_slopes:
            head, tail = base[index]
            self._head_slopes[key] = self._slope(config, base, index, (head + period(config), tail), at_base)
        return self._head_slopes[key]

    def _slope(self, config, base, index: int, grown: tuple[int, int], at_base: Estimate) -> dict[str, int]:
        deeper = self._at_layout(config, [*base[:index], grown, *base[index + 1 :]]).quantities()
        return {name: deeper[name] - value for name, value in at_base.quantities().items()}

    @staticmethod
    def _add(totals: dict[str, float], steps: int, slope: dict[str, int]) -> None:
        for name, change in slope.items():
            totals[name] += steps * change

    def _at_layout(self, config: CheckpointConfig, layout: list[tuple[int, int]]) -> Estimate:
        """The prediction of a shallow model whose lists have `layout`'s (head, tail) blocks: the
        pattern on every head, which is the first k blocks (a cut list is followed by plain ones)."""
        depths = {path: head + tail for path, (head, tail) in zip(self.sizes, layout)}
        shallow = replace(config, blocks=sum(head for head, _ in layout)) if config.checkpoints else config
        return Estimate.of(self.predict(shallow, depths))

    def full(self, config: CheckpointConfig) -> Estimate:
        return Estimate.of(self.predict(config))

    def _copy(self, depths: dict[str, int]) -> Callable[..., Workload]:
        """A build function returning a copy of the meta workload with `depths` blocks per list:
        the lists are cut before copying, so only the kept blocks are copied."""
        work = self._meta
        lists = {path: work.model.get_submodule(path) for path in depths}
        try:
            truncate_blocks(work.model, depths)
            memo: dict[int, object] = {}
            copied = copy.copy(work)
            copied.model = _copy_modules(work.model, memo)
            for name in ("args", "kwargs", "target", "grad_inputs"):  # after the model: tied to its tensors
                setattr(copied, name, copy.deepcopy(getattr(work, name), memo))
        finally:
            for path, blocks in lists.items():
                parent, _, name = path.rpartition(".")
                setattr(work.model.get_submodule(parent), name, blocks)
        return lambda **_: copied


def _copy_modules(module: torch.nn.Module, memo: dict[int, object]) -> torch.nn.Module:
    """deepcopy of a module tree, less the generic walk through each module's attributes (a fifth
    of a prediction's time): numbers, strings, dtypes and devices are shared, which no step changes;
    everything else is copied, caches included (Z-Image's rotary embedder fills its tables on its
    first call, inside the step)."""
    if id(module) in memo:
        return memo[id(module)]
    clone = module.__class__.__new__(module.__class__)
    memo[id(module)] = clone
    state = {}
    for name, value in module.__dict__.items():
        if name == "_modules":
            state[name] = {k: None if m is None else _copy_modules(m, memo) for k, m in value.items()}
        elif name == "_parameters":
            state[name] = {k: _copied_parameter(p, memo) for k, p in value.items()}
        elif name == "_buffers":
            state[name] = {k: None if t is None else copy.deepcopy(t, memo) for k, t in value.items()}
        elif isinstance(value, _IMMUTABLE):
            state[name] = value
        elif isinstance(value, (dict, list, set)) and not value:  # a module's hook tables, mostly
            state[name] = value.copy()  # not copy.copy: an OrderedDict's goes through __reduce_ex__
        else:
            state[name] = copy.deepcopy(value, memo)
    clone.__dict__.update(state)
    return clone


def _copied_parameter(param: torch.nn.Parameter | None, memo: dict[int, object]) -> torch.nn.Parameter | None:
    """A trainable parameter copied (a step gives it a gradient and hooks); a frozen meta one
    shared: no step writes it, and each prediction's tracker registers its storage afresh (a
    quantized base's subclass weights were a third of the copy's time)."""
    if param is None or (param.is_meta and not param.requires_grad):
        return param
    return copy.deepcopy(param, memo)


_IMMUTABLE = (bool, int, float, str, type(None), torch.dtype, torch.device)
