"""Full-depth predictions from shallow ones: the same model with fewer blocks per list.

NOTE [ Affine in depth ]
A block list is a stack of identical blocks. Each block of one role (plain, or inside the schedule's
pattern) adds the same weights, gradients, optimizer state, saved activations, FLOPs and offload
traffic, and the step's peak falls at the same point of the step (the start of backward, or the
recompute of the region backward reaches first) however deep the stack. So the peak, the FLOPs and
the copied bytes are affine in the number of periods of the pattern on each list, as long as the
tail (the blocks after the last whole period) stays the same. A list of N blocks under a pattern of
period p is therefore predicted at depth b = p + N mod p and at b + p, every other list at its own
b, and the difference extrapolated to N. Only schedules that are uniform per list extrapolate this
way: the pattern on the first lists, plain blocks on the rest (`layered`). The planner interpolates
between those for a cut inside a list. `check` compares an extrapolation with the full prediction.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from .config import CheckpointConfig
from .predict import DeviceModel, Prediction, device_model, predict, truncate_blocks
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


def plain(config: CheckpointConfig) -> CheckpointConfig:
    """`config` without checkpointing: its plain blocks' role (attention offload stays)."""
    return replace(config, backend="none", interval=None, stride=None, blocks=None)


def _warm_periods(config: CheckpointConfig) -> int:
    """Whole periods a shallow list needs before each further one adds the same (NOTE [ Affine in
    depth ]): two blocks at least (a list of one block moves the peak's moment), and for offloaded
    regions enough to fill the stash of copies in flight past the first region (unsloth does not
    offload it: it is the model's own input)."""
    if config.offloads_regions:
        return config.offload_stash_depth + 1
    return -(-2 // period(config))


class ShallowPredictor:
    """Predictions of one workload (built once on the meta device) at any depth, cached."""

    def __init__(self, build: Callable[..., Workload], device: str | DeviceModel = "cuda", **build_kwargs):
        self.device = device_model(device)
        self.build_kwargs = build_kwargs
        dtype = build_kwargs.pop("dtype", None) or self.device.dtype
        self._dtype = dtype
        self._meta = build(device="meta", dtype=dtype, **build_kwargs)
        self.sizes = {path: len(self._meta.model.get_submodule(path)) for path in self._meta.spec.block_lists}
        self._cache: dict[tuple, Prediction] = {}
        self.predictions = 0

    @property
    def total_blocks(self) -> int:
        return sum(self.sizes.values())

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
        (None: all of them) and plain blocks on the rest (NOTE [ Affine in depth ]). Each list's
        period is added at the base depths of this very mix of roles: what a list adds to a stage
        may depend on what the other lists run (the stash of copies in flight is shared)."""
        paths = list(self.sizes)
        count = len(paths) if pattern_lists is None else pattern_lists
        roles = {path: config if i < count else plain(config) for i, path in enumerate(paths)}
        base = {path: self._base_depth(path, roles[path]) for path in paths}
        before = self.predictions
        estimate = self._at(config, count, base)
        totals = dict(estimate.quantities())
        for path in paths:
            steps = (self.sizes[path] - base[path]) // period(roles[path])
            if steps:
                deeper = self._at(config, count, {**base, path: base[path] + period(roles[path])}).quantities()
                for name, value in estimate.quantities().items():
                    totals[name] += steps * (deeper[name] - value)
        return Estimate.from_quantities(totals, estimate.context_bytes, self.predictions - before)

    def _base_depth(self, path: str, role: CheckpointConfig) -> int:
        size, repeat = self.sizes[path], period(role)
        return min(size, _warm_periods(role) * repeat + size % repeat)

    def _at(self, config: CheckpointConfig, pattern_lists: int, depths: dict[str, int]) -> Estimate:
        """The prediction with `config`'s pattern on the first `pattern_lists` lists at `depths`."""
        first = sum(depths[p] for p in list(self.sizes)[:pattern_lists])
        shallow = replace(config, blocks=first) if config.checkpoints else config
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
            copied = copy.deepcopy(work)
        finally:
            for path, blocks in lists.items():
                parent, _, name = path.rpartition(".")
                setattr(work.model.get_submodule(parent), name, blocks)
        return lambda **_: copied
