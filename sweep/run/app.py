"""The Hydra app behind `ckpt-sweep run`: one job per cell; each job runs (or skips) its cell in
an isolated child and records the result. Validation and progress live in their own modules
(sweep/run/preflight.py, sweep/run/progress.py), the callback Hydra calls around the jobs."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

import hydra
from omegaconf import DictConfig, OmegaConf

from ckptlib.units import GIB
from sweep.config import structured as configs
from sweep.config.builders import describe_shape, fingerprint, import_builder, is_legacy_fingerprint, is_own_builder
from sweep.config.cell import Cell, cell_from_config
from sweep.config.structured import Rerun
from sweep.machine import environment
from sweep.store import database as store
from sweep.store.results import CellResult
from sweep.vocabulary import RETRYABLE, JobOutcome, Provenance, Status

from . import cpu_guard, progress
from .isolation import answered_with_torch, fork_server_needs, interrupts_held, preload_note, run_isolated
from .scenarios import MeasureSettings, PredictSettings, measure_cell, predict_cell

CONFIG_PATH = str(configs.config_dir())

# NOTE [ A sweep's own process imports no torch ]: the process that runs a sweep's jobs (the console
# script, a SLURM task, a Ray worker) composes, validates, claims and records; its cells run in
# children of its fork server, which has torch imported. So on a host without GPUs it never imports
# torch (1.5 s of CPU in every such process, the fork server's preload beside it): the families' and
# synthetic's entries import none; what needs torch (what a run records of torch,
# environment.torch_facts; a builder of one's own checked and fingerprinted by building it,
# preflight's built_problems and model_of) is asked of a child of the fork server its cells need
# anyway, unless torch is here already (isolation.answered_with_torch); device=auto asks NVML
# before torch. What still imports it: a builder's own module that imports torch (read for its
# signature and presets), the validation of a sweep whose launcher runs its cells elsewhere (no fork
# server here), a GPU host's check that torch has CUDA, the duration warning of a GPU-sized sweep on
# a CPU. tests/sweep/test_layout.py holds it.


configs.register()


@dataclass
class RunState:
    """One (database, run name, hardware) this process writes to."""

    engine: object
    run_id: int | None  # None until written: NOTE [ A run is written when a cell is ]
    device: str
    hardware: str
    done: dict[str, store.Recorded]  # cell key -> what is recorded of it
    written: bool = False


_runs: dict[tuple[str, str, str], RunState] = {}  # of the sweep running in this process


def start_sweep() -> None:
    """Forget the runs an earlier sweep of this process wrote to (a long-lived process, such as a
    test worker or `plan --verify`, runs several): each sweep reads what is recorded afresh."""
    for state in _runs.values():
        state.engine.dispose()
    _runs.clear()


# NOTE [ A run is written when a cell is ]: a sweep reads its run (what is recorded) at its first
# job, but creates it, or refreshes its environment and config (they describe its latest cells),
# only when it claims or records a cell. A sweep that skips every cell leaves the run as its last
# cells left it, and never asks the fork server's children what a run records of torch (the
# server's preload, 2 to 3 s, for nothing: NOTE [ A sweep's own process imports no torch ]).


def run_state(cfg: DictConfig) -> RunState:
    """What this process knows of the job's run: what is recorded of it (none for a new run)."""
    device = f"predicted:{cfg.predict_device}" if cfg.predict else environment.resolve_device(cfg.device)
    key = (cfg.db.url, str(cfg.run.name), device)
    if key not in _runs:
        engine = store.open_store(cfg.db.url)
        hardware = (
            environment.prediction_label(cfg.predict_device, configured_card_bytes(cfg))
            if cfg.predict
            else environment.hardware_label(device)
        )
        run_id = store.find_run(engine, str(cfg.run.name), hardware, run_provenance(cfg))
        done = {} if run_id is None else store.completed_cells(engine, run_id)
        _runs[key] = RunState(engine, run_id, device, hardware, done)
    return _runs[key]


def run_provenance(cfg: DictConfig) -> Provenance:
    return Provenance.PREDICTED if cfg.predict else Provenance.MEASURED


def written_run(cfg: DictConfig, state: RunState) -> int:
    """The run's id, created or refreshed with this job's environment and config the first time this
    process claims or records one of its cells (NOTE [ A run is written when a cell is ])."""
    if state.written:
        return state.run_id
    if cfg.predict:
        env = environment.capture_prediction(cfg.predict_device, configured_card_bytes(cfg))
        device_label = cfg.predict_device
    else:
        cell = cell_from_config(cfg)
        facts = answered_with_torch(environment.torch_facts, cell.builder, cell.training)
        env, device_label = environment.capture(state.device, facts), state.device
    sweep_config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    sweep_config["db"]["url"] = store.redacted(sweep_config["db"]["url"])  # no password is stored
    state.run_id = store.get_or_create_run(
        state.engine,
        str(cfg.run.name),
        state.hardware,
        provenance=run_provenance(cfg),
        device=device_label,
        environment=env,
        config=sweep_config,
    )
    state.written = True
    return state.run_id


def configured_card_bytes(cfg: DictConfig) -> int | None:
    return None if cfg.card_gib is None else round(float(cfg.card_gib) * GIB)


def cell_task(cfg: DictConfig, cell: Cell, device: str) -> tuple:
    """What the isolated child runs for this cell: a prediction, or a measurement (skipping cells
    predicted not to fit the card with skip_predicted_oom, and on a CPU those predicted not to fit
    the host's free memory)."""
    if cfg.predict:
        return predict_cell, (cell.as_dict(), PredictSettings(cfg.predict_device, configured_card_bytes(cfg)))
    host_budget = cpu_guard.host_budget_bytes() if device == "cpu" and not cfg.run.allow_large_cpu else None
    settings = MeasureSettings(
        device,
        cfg.measure.warmup_steps,
        cfg.measure.steps,
        cfg.skip_predicted_oom,
        configured_card_bytes(cfg),
        host_budget,
        cfg.measure.numerics,
        cfg.measure.profile_steps if cfg.measure.profile else 0,
        str(store.trace_folder(str(cfg.db.url))),
    )
    return measure_cell, (cell.as_dict(), settings)


def own_timeout(timeout_s: float) -> tuple[float, str | None]:
    return timeout_s, None


# A cell's time limit: (seconds, why it was cut or None) from its own timeout. A launcher whose
# process has a deadline of its own sets this (sweep/launchers/slurm.py: what the job has left).
time_limit: Callable[[float], tuple[float, str | None]] = own_timeout


def should_run(previous: str | None, rerun: str) -> bool:
    return previous is None or rerun == Rerun.all.name or (rerun == Rerun.failed.name and previous in RETRYABLE)


def settings_note(recorded: store.Recorded, cfg: DictConfig) -> str | None:
    """Why a skipped cell's figures may not be what this sweep asks for (or that it has none)."""
    if recorded.status in RETRYABLE:
        return f"skipped, recorded {recorded.status} earlier: run.rerun=failed measures them again"
    steps, warmup = recorded.steps, recorded.warmup_steps
    if (
        recorded.status != Status.OK
        or steps is None
        or (steps, warmup) == (cfg.measure.steps, cfg.measure.warmup_steps)
    ):
        return None
    return (
        f"recorded with steps={steps}, warmup_steps={warmup} (this sweep asks for steps={cfg.measure.steps}, "
        f"warmup_steps={cfg.measure.warmup_steps}): run.rerun=all measures them again, keeping the earlier attempt"
    )


# NOTE [ A cell knows the model it measured ]: a cell's key names its builder, preset and settings,
# not what the builder builds; iterating on one's own model (new-family) changes that under the same
# key. So each cell of a builder of one's own records a fingerprint of the model (its source,
# parameters and spec), and a cell recorded under another is measured again as a new attempt.
MODEL_CHANGED = "measured again: the model its builder builds changed since it was recorded (a new attempt)"


def model_of(cell: Cell, legacy: bool = False) -> str | None:
    """The fingerprint of the model a cell's builder of one's own builds (config/builders.py:
    fingerprint); taking it builds the model (NOTE [ A sweep's own process imports no torch ])."""
    if not is_own_builder(cell.builder):
        return None
    shape = json.dumps(cell.shape, sort_keys=True)
    return fingerprint_of(cell.builder, cell.preset, shape, cell.training, cell.lora_rank, cell.quantization, legacy)


@functools.cache  # as fingerprint is: one build per model and scheme in a sweep's process
def fingerprint_of(
    target: str, preset: str, shape: str, training: str, lora_rank: int, quantization: str, legacy: bool
) -> str | None:
    take = functools.partial(fingerprint, target, preset, shape, training, lora_rank, quantization, legacy)
    return answered_with_torch(take, target, training)


def model_changed(cell: Cell, model: str | None, previous: store.Recorded | None) -> bool:
    """The model differs from the one the previous attempt measured (NOTE [ Fingerprint schemes ])."""
    if previous is None or model is None or previous.model is None:
        return False
    return previous.model != (model_of(cell, legacy=True) if is_legacy_fingerprint(previous.model) else model)


CLAIM_SLACK_S = 60  # a claim outlives its cell's time limit by this much (recording, a slow start)


def execute(cfg: DictConfig) -> dict:
    """Run (or skip) one cell and record it. Never raises for an outcome of the cell itself."""
    cell = cell_from_config(cfg)
    state = run_state(cfg)
    previous = state.done.get(cell.key)
    summary, model, changed = cell_summary(cell), model_of(cell), None
    if model_changed(cell, model, previous):
        changed = MODEL_CHANGED  # NOTE [ A cell knows the model it measured ]
    elif not should_run(previous and previous.status, cfg.run.rerun.name):
        note = None if cfg.predict else settings_note(previous, cfg)
        return {**summary, "status": previous.status, "skipped": True, "note": note}
    timeout_s, limited_by = time_limit(cfg.measure.timeout_s)
    claimed = store.claim_cell(state.engine, written_run(cfg, state), cell.key, timeout_s + CLAIM_SLACK_S)
    other = measured_elsewhere(claimed, previous)
    if other is not None:
        if claimed.held:
            store.release_claim(state.engine, state.run_id, cell.key)
        return {**summary, **other, "skipped": True}
    try:
        result = measured(cfg, cell, state.device, timeout_s, limited_by)
    except BaseException:  # an interrupted cell leaves its claim to the next writer at once
        # A second SIGTERM (SLURM sends more than one) must not land in the release's query, whose
        # cleanup would then raise a database error in the interruption's place: the job would end
        # as failed, not stopped. A release that fails leaves a claim that ends with this process.
        with interrupts_held(), contextlib.suppress(Exception):
            store.release_claim(state.engine, state.run_id, cell.key)
        raise
    recorded = record(cell, state, result, model)
    return {**recorded, "note": changed or recorded["note"]}


def measured_elsewhere(claimed: store.Claimed, previous: store.Recorded | None) -> dict | None:
    """The status and note of a cell another writer of the run is measuring, or recorded since
    this sweep read the run (NOTE [ One writer per cell ]); None when it is this sweep's to measure."""
    if not claimed.held:
        return {"status": JobOutcome.SKIPPED, "note": f"skipped: another sweep ({claimed.holder}) is measuring it"}
    now = claimed.recorded
    if now is not None and (previous is None or now.attempt > previous.attempt):
        return {"status": now.status, "note": "skipped: another sweep recorded it while this one ran"}
    return None


def measured(cfg: DictConfig, cell: Cell, device: str, timeout_s: float, limited_by: str | None) -> CellResult:
    """The cell's result: run in an isolated child, or `invalid` when its settings are no config."""
    try:
        cell.checkpoint_config()
    except ValueError as error:
        return CellResult(Status.INVALID, str(error))
    task, args = cell_task(cfg, cell, device)
    builder_module, trainings = fork_server_needs(cell.builder, cell.training)
    result = run_isolated(task, args, timeout_s, builder_module, progress.report_phase, trainings)
    if result.status == Status.TIMEOUT and limited_by:
        result.reason = f"{limited_by}: {result.reason}"
    return result


def cell_summary(cell: Cell) -> dict:
    """How the progress display names a cell, run or skipped."""
    return {"cell": cell.describe(), "key": cell.key, "mode": cell.mode, "preset": cell.preset}


def record(cell: Cell, state: RunState, result: CellResult, model: str | None = None) -> dict:
    """Write one cell's result into its run (with the fingerprint of the model it measured, for a
    builder of one's own); the summary the progress display shows."""
    shape = result.shape or describe_shape(import_builder(cell.builder), cell.preset, cell.shape)
    store.record_cell(
        state.engine,
        state.run_id,
        cell.as_dict(),
        cell.key,
        result,
        worker=environment.worker_identity(state.device),
        shape=shape,
        versions={**environment.code_versions(), **({"model": model} if model else {})},
    )
    state.done[cell.key] = store.Recorded(result.status, result.steps, result.warmup_steps, model)
    return {
        **cell_summary(cell),
        "skipped": False,
        "status": str(result.status),
        "reason": result.reason,
        "sec_per_step": result.sec_per_step,
        "peak_bytes": result.peak_bytes,
        "wall_s": result.timings.get("wall_s"),
        "note": preload_note(),
    }


def record_crash(cfg: DictConfig, reason: str) -> dict:
    """A cell whose process died under it before it could record anything (a Ray worker killed),
    recorded `crashed` by another process of the same kind."""
    state = run_state(cfg)
    written_run(cfg, state)
    return record(cell_from_config(cfg), state, CellResult(Status.CRASHED, reason))


@hydra.main(config_path=CONFIG_PATH, config_name="config", version_base=None)
def hydra_app(cfg: DictConfig) -> dict:
    return execute(cfg)
