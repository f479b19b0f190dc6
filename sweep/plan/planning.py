"""`ckpt-sweep plan`: the fastest checkpointing schedule that fits a card, found by prediction
(ckptlib.planner), written three ways, stored as a run of provenance `planned`, and with --verify
measured: the top three as cells of one run, to say whether the predicted order held."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace

from sqlalchemy.engine import Engine

from ckptlib import CheckpointConfig
from ckptlib.config import REGION_MEANINGS
from ckptlib.extrapolate import Estimate, ShallowPredictor
from ckptlib.modes import MODES, OWN_WIRING, WIRINGS, Wiring, as_wired
from ckptlib.planner import Candidate, ScheduleSearch, Throughput, describe, fit_throughput, plan_schedules
from ckptlib.quantize import NAMES as QUANTIZATION_NAMES
from ckptlib.quantize import QUANTIZATIONS
from ckptlib.units import format_bytes
from sweep.config.cell import Cell
from sweep.config.structured import ModeConfig, builtin_builder
from sweep.machine.cards import HOST_LINKS, Budget
from sweep.report.text import slug
from sweep.store.results import CellResult
from sweep.vocabulary import Provenance, Status

# One direction of the host link, in practice (bytes/s).
# Effective throughput without a calibration: dense bf16 matmuls at about 40% of an H100's peak;
# a CPU core pair at what the suite's machines reach in fp32.
ASSUMED_FLOPS = {"cuda": 400e12, "cpu": 50e9}
CPU_COPY_BYTES_PER_S = 5e9
SCHEDULE_FIELDS = [f.name for f in fields(ModeConfig) if f.name != "name"]


@dataclass
class Request:
    family: str
    builder: str  # import path of its build function
    preset: str
    card_bytes: int
    card: str  # how the card was named (a plan's hardware label)
    training: str = "lora"
    quantization: str = "none"  # the base weights' (ckptlib.quantize.NAMES)
    device: str = "cuda"  # the device model (ckptlib.predict.DEVICE_MODELS)
    link: str = "pcie5"
    hardware: str | None = None  # calibrate on cells measured there
    workers: int = field(default_factory=lambda: min(2, os.cpu_count() or 1))
    margin: float = 0.0  # the share of the card kept free
    try_quantized: bool = False  # nothing fits with the base as it is: plan a quantized base instead
    try_smaller: bool = False  # nothing fits at the preset's shape: plan the nearest smaller resolution
    shape: dict[str, int] = field(default_factory=dict)  # overrides of the preset's shape (height, width)

    @property
    def budget(self) -> Budget:
        """The card less its margin, a peak counted with the device model's context."""
        return Budget.on(self.device, self.card_bytes, self.margin)

    @property
    def budget_bytes(self) -> int:
        return self.budget.bytes


@dataclass
class PlanResult:
    request: Request
    plan: ScheduleSearch
    throughput: Throughput
    recommended: Candidate | None  # None: nothing fits
    checked: Estimate | None  # the recommendation's full (not extrapolated) prediction
    lines: list[str]


def assumed_throughput(device: str, link: str) -> Throughput:
    if link not in HOST_LINKS:
        raise ValueError(f"unknown host link {link!r}; known: {', '.join(HOST_LINKS)}")
    if device == "cpu":
        return Throughput(
            f"assumed: {ASSUMED_FLOPS['cpu'] / 1e9:.0f} GFLOP/s, copies at {CPU_COPY_BYTES_PER_S / 1e9:.0f} GB/s "
            "in line with compute (a CPU copies synchronously)",
            1 / ASSUMED_FLOPS["cpu"],
            1 / CPU_COPY_BYTES_PER_S,
            overlaps_copies=False,
        )
    return Throughput(
        f"assumed: {ASSUMED_FLOPS['cuda'] / 1e12:.0f} TFLOP/s effective, host link {link} at "
        f"{HOST_LINKS[link] / 1e9:.0f} GB/s per direction, copies hidden behind compute",
        1 / ASSUMED_FLOPS["cuda"],
        1 / HOST_LINKS[link],
    )


def schedule_key(config: CheckpointConfig) -> tuple:
    """What tells two schedules apart, whatever spelling (interval None or 1) they were given in."""
    interval = config.interval or 1
    blocks = config.blocks if config.checkpoints else None
    if not config.checkpoints:
        interval = 1
    regions = config.regions if interval > 1 else "segments"
    return (
        config.backend,
        interval,
        config.stride or interval,
        blocks,
        config.offload_attention,
        config.offload_attention_in_regions,
        regions,
        config.ffn_scope if config.ffn_only else "modules",
        config.attention_offload_scope if config.offload_attention else "module",
    )


def check_quantization(name: str) -> None:
    """ValueError naming an unknown scheme or the package it lacks."""
    from ckptlib import UnsupportedModeError
    from ckptlib.quantize import check_supported

    try:
        check_supported(name, "meta")  # predictions quantize the meta model's weights
    except UnsupportedModeError as error:
        raise ValueError(str(error)) from None


def make_plan(request: Request, engine: Engine | None, progress=None) -> PlanResult:
    """The plan for `request`; with `try_quantized`, a base in which no schedule fits is planned
    again with the first installed quantized base; with `try_smaller`, a shape at which none fits
    (with the base planned last) at the nearest smaller resolution that fits."""
    from sweep.config.builders import import_builder

    build = import_builder(request.builder)
    predictor = ShallowPredictor(
        build,
        request.device,
        preset=request.preset,
        training=request.training,
        quantization=request.quantization,
        **request.shape,
    )
    may_quantize = request.try_quantized and request.quantization == "none"
    if may_quantize and not request.budget.fits(predictor.weight_bytes):  # no schedule can fit: no search
        weights = request.budget.against(predictor.weight_bytes)
        why = f"nothing fits with the base as it is: its weights alone need {weights}"
        quantized = _quantized_instead(request, why, engine, progress)
        if quantized is not None:  # its own plan tried the smaller resolutions
            return quantized
    throughput = assumed_throughput(request.device, request.link)
    interval_regions = family_wiring(request).interval_regions
    plan = plan_schedules(predictor, throughput, request.workers, progress, interval_regions)
    if engine is not None:
        throughput = _calibrated(engine, request, plan, throughput)
        plan = plan.retimed(throughput)
    recommended, checked = _recommend(plan, predictor, request.budget_bytes)
    lines = describe_outcome(request, plan, throughput, recommended, checked)
    outcome = PlanResult(request, plan, throughput, recommended, checked, lines)
    if recommended is None and may_quantize:
        closest = plan.smallest()
        why = (
            f"nothing fits with the base as it is ({len(plan.candidates)} schedules): the smallest, "
            f"{describe(closest.config)}, needs {request.budget.against(closest.peak_bytes)}"
        )
        quantized = _quantized_instead(request, why, engine, progress)
        if quantized is not None:  # its own plan tried the smaller resolutions
            return quantized
    return _smaller_if_unfit(outcome, engine, progress)


# The training resolutions a trainer steps down through, as short sides (SimpleTuner's dataset
# "resolution" with "resolution_type": "pixel").
SHORT_SIDES = (1024, 768, 512, 384, 256)


def smaller_shape(request: Request) -> dict[str, int] | None:
    """The request's shape at the next smaller training resolution (aspect kept, sides a multiple of
    64), as build overrides; None for a builder without an image shape or at the smallest."""
    from sweep.config.builders import import_builder

    resolve = getattr(import_builder(request.builder), "resolve_shape", None)
    if resolve is None:
        return None
    shape = resolve(request.preset, **request.shape)
    short = min(shape.height, shape.width)
    side = next((s for s in SHORT_SIDES if s < short), None)
    if side is None:
        return None
    scale = side / short
    return {
        **request.shape,
        "height": 64 * round(shape.height * scale / 64),
        "width": 64 * round(shape.width * scale / 64),
    }


def _smaller_if_unfit(outcome: PlanResult, engine: Engine | None, progress) -> PlanResult:
    """Where nothing fits, the plan at the nearest smaller resolution that fits, led by why (the
    base precision stays the one just planned); the outcome as it is when none does."""
    request = outcome.request
    if outcome.recommended is not None or not request.try_smaller:
        return outcome
    closest = outcome.plan.smallest()
    base = "" if request.quantization == "none" else f" with the {request.quantization} base"
    why = (
        f"nothing fits at {_resolution(request)}{base}: "
        f"the smallest, {describe(closest.config)}, needs {request.budget.against(closest.peak_bytes)}"
    )
    smaller = replace(request, try_quantized=False, try_smaller=False)
    while (shape := smaller_shape(smaller)) is not None:
        unfit, smaller = smaller, replace(smaller, shape=shape)
        _announce(progress, f"nothing fits at {_resolution(unfit)}: planning at {_resolution(smaller)}")
        found = make_plan(smaller, engine, progress)
        if found.recommended is not None:
            side = min(shape["height"], shape["width"])
            found.lines[:0] = [
                why,
                f"so this plan trains at {_resolution(smaller)}, the nearest smaller resolution that fits "
                f'(SimpleTuner\'s dataset config: "resolution": {side}, "resolution_type": "pixel"):',
            ]
            return found
    return outcome


def _announce(progress, text: str) -> None:
    """A plan after the first starts: a progress that can say why hears it (`announce`)."""
    announce = getattr(progress, "announce", None)
    if announce is not None:
        announce(text)


def _resolution(request: Request) -> str:
    """'1024x1024 (4096 tokens)': the shape a plan trains at."""
    from sweep.config.builders import describe_shape, import_builder

    facts = describe_shape(import_builder(request.builder), request.preset, request.shape)
    tokens = f" ({facts['tokens']} tokens)" if facts.get("tokens") else ""
    return f"{facts.get('height')}x{facts.get('width')}{tokens}"


def _quantized_instead(request: Request, why: str, engine: Engine | None, progress) -> PlanResult | None:
    """The plan with the first installed quantized base, led by `why` (nothing fits the base as it
    is); None where no quantization is installed."""
    for quantization in QUANTIZATION_NAMES[1:]:
        try:
            check_quantization(quantization)
        except ValueError:
            continue
        _announce(progress, f"{why}: planning with the {quantization} base")
        outcome = make_plan(replace(request, quantization=quantization, try_quantized=False), engine, progress)
        outcome.lines[:0] = [
            why,
            f"so this plan holds the frozen base weights in {quantization} (--quantization none keeps them as "
            f"they are; --quantization {' / '.join(QUANTIZATION_NAMES[2:])} plans another base):",
        ]
        return outcome
    return None


def _recommend(
    plan: ScheduleSearch, predictor: ShallowPredictor, budget: int
) -> tuple[Candidate | None, Estimate | None]:
    """The fastest fitting candidate whose full prediction fits too (an interpolated estimate can
    be a little off: the next one is tried)."""
    for candidate in plan.fitting(budget)[:5]:
        checked = predictor.full(candidate.config)
        if checked.fits(budget):
            return candidate, checked
    return None, None


def _calibrated(engine: Engine, request: Request, plan: ScheduleSearch, assumed: Throughput) -> Throughput:
    """Fit sec/step to the FLOPs and copies of this family's cells measured on `request.hardware`."""
    if request.hardware is None:
        return assumed
    from sweep.store.query import load_cells, select_runs

    cells = load_cells(engine, select_runs(engine, [request.hardware]))
    cells = cells[
        (cells["family"] == request.family)
        & (cells["preset"] == request.preset)
        & (cells["training"] == request.training)
        & (cells["quantization"] == request.quantization)
        & (cells["provenance"] == Provenance.MEASURED)
        & (cells["status"] == Status.OK)
    ]
    by_key = {schedule_key(c.config): c.estimate for c in plan.candidates}
    measured = []
    for config, seconds in zip(cells["config"], cells["sec_per_step"]):
        estimate = by_key.get(schedule_key(recorded_schedule(config)))
        if estimate is not None:
            measured.append((estimate, seconds))
    if len(measured) < 2:
        return assumed
    return fit_throughput(
        measured,
        assumed.overlaps_copies,
        f"fitted to {len(measured)} cells of {request.family} {request.preset} measured on {request.hardware}",
    )


def docs_schedules(request: Request) -> dict[str, CheckpointConfig]:
    """The docs' modes as SimpleTuner wires them for the request's family (its interval grouping and
    FFN scope; a model of one's own takes them as they are), as a cell of that mode records them."""
    wiring = family_wiring(request)
    return {name: as_wired(config, wiring) for name, config in MODES.items()}


def family_wiring(request: Request) -> Wiring:
    """How SimpleTuner wires the request's family (ckptlib.modes.WIRINGS); a model of one's own, or
    a built-in family's name on another builder, takes the defaults."""
    builtin = request.builder == builtin_builder(request.family)
    return WIRINGS.get(request.family, OWN_WIRING) if builtin else OWN_WIRING


def recorded_schedule(config: dict) -> CheckpointConfig:
    """The schedule of a recorded cell's config (JSON: an explicit block set is a list)."""
    schedule = {k: (tuple(v) if isinstance(v, list) else v) for k, v in config.items() if k in SCHEDULE_FIELDS}
    return CheckpointConfig(**schedule)


def describe_outcome(
    request: Request,
    plan: ScheduleSearch,
    throughput: Throughput,
    recommended: Candidate | None,
    checked: Estimate | None,
) -> list[str]:
    lines = [
        f"{request.family} {request.preset}{' at ' + _resolution(request) if request.shape else ''} "
        f"({describe_training(request)}) on {request.card}: "
        f"{request.budget.heading()}; {len(plan.candidates)} schedules from {plan.predictions} "
        f"shallow predictions ({request.device} device model)",
        f"step time: {throughput.description}",
    ]
    lines += [f"not offered: {label}: {why}" for label, why in sorted(plan.unsupported.items())]
    lines += frontier_table(plan, request.budget_bytes, recommended)
    baseline = plan.baseline
    if recommended is None:
        closest = plan.smallest()
        lines.append(
            f"nothing fits: the smallest peak is {describe(closest.config)}: "
            f"{request.budget.against(closest.peak_bytes)}"
        )
        if request.quantization == "none":
            others = ", ".join(q for q in QUANTIZATION_NAMES if q not in ("none", "int8-torchao"))
            lines.append(
                "  a quantized base holds the frozen weights in about half the bytes: run the same command with "
                f"--quantization int8-torchao (or {others})"
            )
        return lines
    wiring = family_wiring(request)
    overhead = recommended.seconds / baseline.seconds - 1 if baseline and baseline.seconds else float("nan")
    peak = checked.peak_bytes if checked else recommended.peak_bytes
    lines += [
        f"recommended: {describe(recommended.config)}",
        f"  predicted peak {request.budget.against(peak)} (a full prediction; the planner's estimate was "
        f"{format_bytes(recommended.peak_bytes)})",
        f"  predicted {recommended.seconds:.3f} s/step, {overhead:+.1%} over no checkpointing",
        "  SimpleTuner: " + simpletuner(recommended.config, request.quantization, wiring),
        "  measure it: " + run_command(request, recommended.config),
        "  ckptlib: " + ckptlib_line(recommended.config),
    ]
    if simpletuner_gaps(recommended.config, wiring):
        lines += _expressible_in_simpletuner(request, plan, wiring)
    return lines


def _expressible_in_simpletuner(request: Request, plan: ScheduleSearch, wiring: Wiring) -> list[str]:
    """For a schedule SimpleTuner cannot express (simpletuner_gaps), the fastest fitting one it can."""
    whole = [c for c in plan.fitting(request.budget_bytes) if not simpletuner_gaps(c.config, wiring)]
    if not whole:
        return [
            "  SimpleTuner can express no fitting schedule: every one that fits checkpoints only some blocks "
            "or offloads attention outside recomputed blocks only"
        ]
    best = whole[0]
    return [
        f"fastest schedule SimpleTuner can express: {describe(best.config)}, predicted "
        f"{format_bytes(best.peak_bytes)} and {best.seconds:.3f} s/step (the planner's estimate)",
        "  SimpleTuner: " + simpletuner(best.config, request.quantization, wiring),
        "  measure it: " + run_command(request, best.config),
    ]


def describe_training(request: Request) -> str:
    """'lora', or 'lora, int8-torchao base' for a quantized base."""
    if request.quantization == "none":
        return request.training
    return f"{request.training}, {request.quantization} base"


def plot_name(request: Request) -> str:
    """The frontier's file name: one per model, training, base precision, card and device model,
    so that no plan's picture overwrites another's."""
    return slug(f"plan-{_model(request)}-{describe_training(request)}-{request.card}-{request.device}")


def _model(request: Request) -> str:
    """'flux1 dev', or 'flux1 dev height=768 width=768' at another shape than the preset's."""
    return " ".join([request.family, request.preset, *(f"{k}={v}" for k, v in request.shape.items())])


def frontier_table(plan: ScheduleSearch, budget: int, recommended: Candidate | None, rows: int = 14) -> list[str]:
    """The Pareto frontier by peak, thinned to about `rows` rows (the recommendation always shown)."""
    front = plan.frontier()
    step = max(1, -(-len(front) // rows))
    shown = [c for i, c in enumerate(front) if i % step == 0 or c is recommended or i == len(front) - 1]
    lines = [f"Pareto frontier ({len(front)} schedules, {len(shown)} shown; predicted):"]
    lines.append(f"  {'peak':>11}  {'sec/step':>9}  schedule")
    for c in shown:
        mark = "  <- recommended" if c is recommended else ("" if c.estimate.fits(budget) else "  (over budget)")
        lines.append(f"  {format_bytes(c.peak_bytes):>11}  {c.seconds:9.4f}  {describe(c.config)}{mark}")
    return lines


def simpletuner_gaps(config: CheckpointConfig, wiring: Wiring = OWN_WIRING) -> list[str]:
    """What of `config` SimpleTuner's keys cannot say for a family wired as `wiring`: a cut of the
    blocks, an interval that groups blocks otherwise than the family's `gradient_checkpointing_interval`
    does, and attention offload outside recomputed blocks only (its
    `gradient_checkpointing_offload_attention` offloads inside them too, which holds more: NOTE [
    Attention offload inside a region ] in ckptlib/wiring.py)."""
    gaps = []
    if config.checkpoints and config.blocks is not None:
        gaps.append(f"checkpointing the {_blocks(config)} only: it checkpoints every block")
    if not _interval_expressible(config, wiring):
        mine, theirs = (
            REGION_MEANINGS[c.regions].format(n=config.interval) for c in (config, as_wired(config, wiring))
        )
        gaps.append(f"{mine}: in this family its gradient_checkpointing_interval checkpoints {theirs}")
    if config.offload_attention and config.checkpoints and not config.offload_attention_in_regions:
        gaps.append(
            "attention offload outside recomputed blocks only: its gradient_checkpointing_offload_attention "
            "offloads inside them too, which holds more"
        )
    return gaps


def _interval_expressible(config: CheckpointConfig, wiring: Wiring) -> bool:
    """Whether SimpleTuner's interval means `config`'s grouping in the family: wired as the family
    wires an interval (ckptlib.modes.as_wired), the schedule groups its blocks as before."""
    return as_wired(config, wiring).regions == config.regions


def simpletuner(config: CheckpointConfig, quantization: str = "none", wiring: Wiring = OWN_WIRING) -> str:
    """The schedule, and the base precision it was planned with, as SimpleTuner's config keys for a
    family wired as `wiring`; what SimpleTuner has no key for is said so, and left out of the keys
    (an interval it would read otherwise: it then checkpoints every block)."""
    base = (
        dict(QUANTIZATIONS[quantization].simpletuner)
        if quantization != "none"
        else {"base_model_precision": "no_change"}
    )
    keys = {**base, "gradient_checkpointing": config.checkpoints}
    if config.checkpoints:
        keys["gradient_checkpointing_backend"] = config.backend
        if (config.interval or 1) > 1 and _interval_expressible(config, wiring):
            keys["gradient_checkpointing_interval"] = config.interval
            if config.stride:
                keys["gradient_checkpointing_segment_stride"] = config.stride
    if config.offload_attention and (config.offload_attention_in_regions or not config.checkpoints):
        keys["gradient_checkpointing_offload_attention"] = True
    import json

    gaps = simpletuner_gaps(config, wiring)
    return json.dumps(keys) + (f" (SimpleTuner has no key for {'; nor for '.join(gaps)})" if gaps else "")


def cell_overrides(request: Request) -> list[str]:
    """The overrides of `ckpt-sweep run sweep=none` that name the planned cell: its model, shape,
    training and base precision."""
    family = [f"family={request.family}"]
    if request.builder != builtin_builder(request.family):  # the user's own model
        family = [f"family._target_={request.builder}", f"family.name={request.family}"]
    cell = [f"preset={request.preset}", f"training={request.training}", f"quantization={request.quantization}"]
    return family + cell + [f"+shape.{name}={value}" for name, value in request.shape.items()]


def run_command(request: Request, config: CheckpointConfig) -> str:
    """The `ckpt-sweep run` line that measures exactly the planned cell and schedule."""
    return f"ckpt-sweep run sweep=none {' '.join(cell_overrides(request))} {run_override(config)}"


def run_override(config: CheckpointConfig) -> str:
    """The schedule as `mode.*` overrides of a sweep."""
    words = [f"mode=none mode.name=planned mode.backend={config.backend}"]
    for name in ("interval", "stride"):
        if getattr(config, name):
            words.append(f"mode.{name}={getattr(config, name)}")
    if (config.interval or 1) > 1:  # said, not left to the family's wiring (Cell.regions)
        words.append(f"mode.regions={config.regions}")
    if config.ffn_only:  # said, not left to the family's wiring (Cell.ffn_scope)
        words.append(f"mode.ffn_scope={config.ffn_scope}")
    if config.blocks is not None and config.checkpoints:
        blocks = config.blocks if isinstance(config.blocks, int) else "[" + ",".join(map(str, config.blocks)) + "]"
        words.append(f"mode.blocks={blocks}")
    if config.offload_attention:  # its scope said, not left to the family's wiring (Cell.attention_offload_scope)
        words.append(f"mode.offload_attention=true mode.attention_offload_scope={config.attention_offload_scope}")
    return " ".join(words)


def ckptlib_line(config: CheckpointConfig) -> str:
    arguments = [repr(config.backend)]
    default = CheckpointConfig()
    arguments += [
        f"{name}={getattr(config, name)!r}"
        for name in SCHEDULE_FIELDS[1:]
        if getattr(config, name) and getattr(config, name) != getattr(default, name)
    ]
    return f"ckptlib.CheckpointConfig({', '.join(arguments)})"


def _blocks(config: CheckpointConfig) -> str:
    from ckptlib.plan import describe_blocks

    return describe_blocks(config.blocks)


def planned_cells(outcome: PlanResult) -> list[tuple[dict, str, CellResult, dict]]:
    """The frontier (and the recommendation) as cells of a planned run: predicted peak and time,
    labelled as predictions in every field that holds them."""
    request, chosen = outcome.request, outcome.recommended
    shown = outcome.plan.frontier() + ([chosen] if chosen and chosen not in outcome.plan.frontier() else [])
    cells = []
    for rank, candidate in enumerate(shown, 1):
        config = candidate.config
        cell = Cell(
            family=request.family,
            builder=request.builder,
            preset=request.preset,
            mode="planned" if candidate is chosen else f"frontier-{rank}",
            training=request.training,
            quantization=request.quantization,
            shape=dict(request.shape),
            **{name: getattr(config, name) for name in SCHEDULE_FIELDS},
        )
        result = CellResult(
            status=Status.OK,
            peak_bytes=(
                outcome.checked.peak_bytes if candidate is chosen and outcome.checked else candidate.peak_bytes
            ),
            report={
                "schedule": describe(config),
                "recommended": candidate is chosen,
                "interpolated": candidate.interpolated,
                "flops": candidate.estimate.flops,
                "copied_bytes": candidate.estimate.copied_bytes,
                "predicted_s_per_step": candidate.seconds,  # a prediction: sec_per_step stays empty
            },
        )
        cells.append((cell.as_dict(), cell.key, result, {}))
    return cells


def store(engine: Engine, outcome: PlanResult) -> int:
    from sweep.store.database import replace_runs

    request = outcome.request
    run = {
        "name": f"plan {_model(request)} {describe_training(request)}",
        "hardware": f"{request.card} ({request.device} model)",
        "provenance": Provenance.PLANNED,
        "source": "ckpt-sweep plan",
        "environment": {"budget_bytes": request.budget_bytes, "throughput": outcome.throughput.description},
        "cells": planned_cells(outcome),
    }
    return replace_runs(engine, [run])[0]
