"""The fastest checkpointing schedule that fits a memory budget, found by prediction.

The schedule space: every backend x (interval, stride) x attention offload pattern, each either on
every block or on the first k blocks only (k = 1 ... all, counted through the block lists). A
pattern's estimates on whole block lists come from shallow predictions (ckptlib/extrapolate.py);
a cut inside a list is interpolated between the estimates with that list plain and with it under
the pattern (memory, FLOPs and copies all move block by block). A step's time is modelled from its
FLOPs and its offload traffic (`Throughput`), either assumed for a device or fitted to measured steps.
"""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import torch

from .config import REGION_MEANINGS, CheckpointConfig
from .extrapolate import Estimate, ShallowPredictor, period
from .spec import UnsupportedModeError

# (interval, stride) of whole-block patterns; FFN-only backends take (1, None) and (1, 2).
# (interval, stride) per backend. The first-k cut gives the fine steps; these are the patterns whose
# memory/time trade differs in kind. unsloth keeps to single-block regions: its longer regions and
# strides move less of what it offloads (the docs: "a fit lever, not a speed lever").
BACKEND_PATTERNS = {
    "torch": ((1, None), (2, None), (2, 4)),
    "unsloth": ((1, None),),
    "torch-ffn": ((1, None),),
    "unsloth-ffn": ((1, None),),
}


def patterns(ffn_scope: str = "modules", interval_regions: str = "segments") -> list[CheckpointConfig]:
    """Every pattern the planner considers, no checkpointing first; the FFN-only backends recompute
    `ffn_scope` (a spec with feed-forward sides: SimpleTuner's, what its `-ffn` keys run). Where the
    trainer's interval checkpoints one block in N alone (`interval_regions="blocks"`: ckptlib.modes
    .Wiring), that pattern too, so that what its interval key trains is among the candidates."""
    found = [CheckpointConfig("none", offload_attention=a) for a in (False, True)]
    for backend, schedules in BACKEND_PATTERNS.items():
        for (interval, stride), attention in ((s, a) for s in schedules for a in (False, True)):
            interval = interval if interval > 1 else None  # the spelling users write for single blocks
            config = CheckpointConfig(backend, interval=interval, stride=stride, offload_attention=attention)
            found.append(replace(config, ffn_scope=ffn_scope) if config.ffn_only else config)
            if interval_regions == "blocks" and interval and not stride and not config.ffn_only:
                found.append(replace(config, regions="blocks"))
    return found


@dataclass(frozen=True)
class Throughput:
    """How fast a target runs a step: seconds = fixed + FLOPs x per-FLOP + the copy time compute
    does not hide (all of it on a CPU, which copies synchronously)."""

    description: str
    seconds_per_flop: float
    seconds_per_copied_byte: float
    fixed_seconds: float = 0.0
    overlaps_copies: bool = True

    def step_seconds(self, estimate: Estimate) -> float:
        compute = self.fixed_seconds + estimate.flops * self.seconds_per_flop
        copies = estimate.copied_bytes * self.seconds_per_copied_byte
        return compute + (max(0.0, copies - compute) if self.overlaps_copies else copies)


def fit_throughput(measured: Sequence[tuple[Estimate, float]], overlaps_copies: bool, description: str) -> Throughput:
    """Least squares of measured sec/step on (1, FLOPs, copied bytes); coefficients kept positive
    (a term the cells cannot resolve is dropped)."""
    if len(measured) < 2:
        raise ValueError(f"a fit needs 2 or more measured steps, got {len(measured)}")
    columns = [[1.0] * len(measured), [float(e.flops) for e, _ in measured]]
    if any(e.copied_bytes for e, _ in measured):
        columns.append([float(e.copied_bytes) for e, _ in measured])
    seconds = torch.tensor([s for _, s in measured], dtype=torch.float64)
    design = torch.tensor(columns, dtype=torch.float64).T
    for width in range(design.shape[1], 0, -1):
        coefficients = torch.linalg.lstsq(design[:, :width], seconds.unsqueeze(1)).solution.squeeze(1).tolist()
        if all(c >= 0 for c in coefficients[1:]):
            break
    fixed, per_flop, per_byte = (coefficients + [0.0, 0.0])[:3]
    return Throughput(description, max(per_flop, 0.0), max(per_byte, 0.0), max(fixed, 0.0), overlaps_copies)


@dataclass(frozen=True)
class Candidate:
    config: CheckpointConfig
    estimate: Estimate
    seconds: float  # predicted sec/step
    interpolated: bool  # a cut inside a block list (between two extrapolated estimates)

    @property
    def peak_bytes(self) -> int:
        return self.estimate.peak_bytes


@dataclass
class ScheduleSearch:
    candidates: list[Candidate]
    baseline: Candidate | None  # no checkpointing
    unsupported: dict[str, str] = field(default_factory=dict)  # pattern -> why the model refuses it
    predictions: int = 0

    def fitting(self, budget_bytes: int) -> list[Candidate]:
        """Candidates that fit, fastest first; among equally fast ones, the fewer offload copies (on
        a GPU copies hidden behind compute cost no modelled time, yet contend for the host link and
        the copy engines when measured), then the smaller peak."""
        fit = [c for c in self.candidates if c.estimate.fits(budget_bytes)]
        return sorted(fit, key=lambda c: (round(c.seconds, 9), c.estimate.copied_bytes, c.peak_bytes))

    def smallest(self) -> Candidate:
        return min(self.candidates, key=lambda c: (c.estimate.peak_bytes + c.estimate.context_bytes, c.seconds))

    def retimed(self, throughput: Throughput) -> ScheduleSearch:
        """The same estimates under another step-time model (a calibration)."""
        timed = [replace(c, seconds=throughput.step_seconds(c.estimate)) for c in self.candidates]
        baseline = next((c for c in timed if self.baseline and c.config == self.baseline.config), None)
        return ScheduleSearch(timed, baseline, dict(self.unsupported), self.predictions)

    def frontier(self) -> list[Candidate]:
        """The Pareto frontier: no other candidate is both smaller and faster; by peak."""
        front: list[Candidate] = []
        for candidate in sorted(self.candidates, key=lambda c: (c.peak_bytes, c.seconds)):
            if not front or candidate.seconds < front[-1].seconds:
                front.append(candidate)
        return front


def plan_schedules(
    predictor: ShallowPredictor,
    throughput: Throughput,
    workers: int = 1,
    progress: Callable[[str, int, int], None] | None = None,  # (pattern, patterns done, patterns in all)
    interval_regions: str = "segments",  # what the trainer's interval groups (patterns)
) -> ScheduleSearch:
    """Every schedule of the space for `predictor`'s workload, estimated and timed; patterns are
    predicted by `workers` forked processes (each with its own cache)."""
    sizes = list(predictor.sizes.values())
    plan = ScheduleSearch([], None)
    todo = patterns(predictor.ffn_scope, interval_regions)
    results = list(_anchors_of_every_pattern(predictor, todo, workers, progress))
    done = {pattern: anchors for pattern, anchors, _ in results}
    found = {pattern: done[pattern] for pattern in todo}  # in a fixed order, however the workers finished
    for pattern, anchors in found.items():
        if isinstance(anchors, str):
            plan.unsupported[describe(pattern)] = anchors
        elif not pattern.checkpoints:
            plan.candidates.append(_candidate(pattern, anchors[0], throughput, interpolated=False))
    for pattern, anchors in found.items():
        plain = found[CheckpointConfig("none", offload_attention=pattern.offload_attention)]
        if pattern.checkpoints and not isinstance(anchors, str) and not isinstance(plain, str):
            plan.candidates += list(_cuts(pattern, sizes, plain[0], anchors, throughput))
    plan.baseline = next((c for c in plan.candidates if c.config == CheckpointConfig("none")), None)
    plan.predictions = sum(predictions for _, _, predictions in results)
    return plan


def _anchors_of_every_pattern(predictor: ShallowPredictor, todo: list[CheckpointConfig], workers: int, progress):
    """(pattern, its estimates or why it is unsupported, the shallow predictions it took), the
    costliest patterns handed out first, so that no worker is left with a long one at the end."""
    todo = sorted(todo, key=_expected_cost, reverse=True)
    if workers <= 1:
        results = (_anchors(predictor, pattern) for pattern in todo)
    else:
        context = multiprocessing.get_context("fork")  # the predictor is inherited, not pickled
        pool = context.Pool(workers, initializer=_start_worker, initargs=(predictor,))
        results = pool.imap_unordered(_worker_anchors, todo)
    try:
        for done, (pattern, anchors, predictions) in enumerate(results, 1):
            if progress:
                progress(describe(pattern), done, len(todo))
            yield pattern, anchors, predictions
    finally:
        if workers > 1:
            pool.close()
            pool.join()


def _expected_cost(pattern: CheckpointConfig) -> tuple[bool, int]:
    """A pattern's search time, roughly: its shallow models are deeper the longer its period, and
    offloaded regions need more warm periods (`_warm_periods`); no checkpointing takes three
    predictions. Flux.1 dev in one process: 2.6 s for interval 2 stride 4, 1.7-2.3 s for the
    period-2 and unsloth patterns, 0.8-1.2 s for torch and torch-ffn, 0.2 s for none."""
    return pattern.checkpoints, period(pattern) + pattern.offloads_regions


_WORKER_PREDICTOR: list[ShallowPredictor] = []  # a forked worker's own


def _start_worker(predictor: ShallowPredictor) -> None:
    # NOTE [ OpenMP after fork ]: the parent's OpenMP thread pool does not survive the fork, and the
    # first parallel op of the child (a deep copy of a large real tensor: Qwen Image's rotary table)
    # waits for its threads for ever. One thread per worker: torch then runs every op inline.
    torch.set_num_threads(1)
    # The heap inherited from the parent (the meta model, torch's and diffusers' modules) is never
    # garbage here: the collector's full passes skip it (a tenth of Flux.1 dev's int8 search).
    gc.freeze()
    _WORKER_PREDICTOR[:] = [predictor]


def _worker_anchors(pattern: CheckpointConfig) -> tuple[CheckpointConfig, list | str, int]:
    return _anchors(_WORKER_PREDICTOR[0], pattern)


def _anchors(predictor: ShallowPredictor, pattern: CheckpointConfig) -> tuple[CheckpointConfig, list | str, int]:
    """A pattern's estimates: with the first 1 ... all lists under it, and each list cut (the
    pattern on its first h blocks) at the heads the predictor extrapolates."""
    before = predictor.predictions
    try:
        if pattern.checkpoints:
            lists = range(len(predictor.sizes))
            anchors: list | str = [
                [predictor.layered(pattern, count + 1) for count in lists],
                [predictor.cut(pattern, index) for index in lists],
            ]
        else:
            anchors = [predictor.layered(pattern)]
    except UnsupportedModeError as error:
        anchors = str(error)
    return pattern, anchors, predictor.predictions - before


def _cuts(pattern, sizes: list[int], plain: Estimate, anchors: list, throughput: Throughput) -> Iterable[Candidate]:
    """The pattern on the first k blocks, k = 1 ... all: extrapolated where the predictor gave a
    head, interpolated between the nearest two elsewhere."""
    wholes, cuts = anchors
    ends = [plain, *wholes]  # ends[i]: the first i lists under the pattern
    total, first = sum(sizes), 0
    for index, size in enumerate(sizes):
        known = {0: ends[index], **cuts[index], size: ends[index + 1]}
        heads = sorted(known)
        for head in range(1, size + 1):
            below = max(h for h in heads if h <= head)
            above = min(h for h in heads if h >= head)
            share = 0.0 if above == below else (head - below) / (above - below)
            estimate = known[below].blend(known[above], share)
            k = first + head
            config = replace(pattern, blocks=None if k == total else k)
            yield _candidate(config, estimate, throughput, interpolated=head not in known)
        first += size


def _candidate(config: CheckpointConfig, estimate: Estimate, throughput: Throughput, interpolated: bool) -> Candidate:
    return Candidate(config, estimate, throughput.step_seconds(estimate), interpolated)


def describe(config: CheckpointConfig) -> str:
    """A schedule in one short phrase: 'torch interval 2 stride 4, first 12 blocks, attention offload'."""
    parts = [config.backend]
    if (config.interval or 1) > 1:
        parts[0] += f" interval {config.interval}"
    if config.stride:
        parts[0] += f" stride {config.stride}"
    if (config.interval or 1) > 1 and config.regions != "segments":
        parts[0] += f" ({REGION_MEANINGS[config.regions].format(n=config.interval)})"
    if config.blocks is not None and config.checkpoints:
        from .plan import describe_blocks

        parts.append(describe_blocks(config.blocks))
    if config.offload_attention:
        parts.append("attention offload")
    return ", ".join(parts)
