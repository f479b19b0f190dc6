"""The Hydra app behind `ckpt-sweep run`: one job per cell, a callback for validation and progress."""
from __future__ import annotations

import importlib
import json
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from ckptlib.quantize import NAMES as QUANTIZATION_NAMES
from ckptlib.units import GIB

from . import environment, gpus, store

from .cell import DTYPES, Cell, cell_from_config, import_builder
from .isolation import run_isolated
from .results import CellResult
from .scenarios import MeasureSettings, PredictSettings, measure_cell, predict_cell
from .status import RETRYABLE, Status

CONFIG_PATH = str(environment.PROJECT_ROOT / "conf")
RERUN_CHOICES = ("none", "failed", "all")


def register_families() -> None:
    """Every ckptlib family becomes `family=<name>` (conf/family/*.yaml adds the synthetic one)."""
    from hydra.core.config_store import ConfigStore

    from ckptlib.families import all_families

    store_ = ConfigStore.instance()
    for name, family in all_families().items():
        store_.store(group="family", name=name, node={
            "name": name, "_target_": f"ckptlib.families.builders.{name}",
            "default_preset": "tiny" if family.unsupported else family.default_preset})


register_families()


def register_resolvers() -> None:
    """What the launcher presets ask of this machine: one GPU per cell where there are GPUs,
    otherwise `workers` parallel CPU cells."""
    OmegaConf.register_new_resolver("gpus_per_cell", lambda: 1 if gpus.count() else 0, replace=True)
    OmegaConf.register_new_resolver("ray_cpus", lambda workers: None if gpus.count() else int(workers), replace=True)


register_resolvers()


class SweepConfigError(ValueError):
    """The sweep cannot start; nothing was run or written."""


@dataclass
class RunState:
    """One (database, run name, hardware) this process writes to."""

    engine: object
    run_id: int
    device: str
    hardware: str
    done: dict[str, str]  # cell key -> status already recorded


_runs: dict[tuple[str, str, str], RunState] = {}


def run_state(cfg: DictConfig) -> RunState:
    device = f"predicted:{cfg.predict_device}" if cfg.predict else environment.resolve_device(cfg.device)
    key = (cfg.db.url, str(cfg.run.name), device)
    if key not in _runs:
        engine = store.open_store(cfg.db.url)
        if cfg.predict:
            env = environment.capture_prediction(cfg.predict_device, card_bytes(cfg))
            provenance, device_label = "predicted", cfg.predict_device
        else:
            env, provenance, device_label = environment.capture(device), "measured", device
        sweep_config = OmegaConf.to_container(cfg, resolve=True)
        run_id = store.get_or_create_run(engine, str(cfg.run.name), env["hardware"], provenance=provenance,
                                         device=device_label, environment=env, config=sweep_config)
        _runs[key] = RunState(engine, run_id, device, env["hardware"], store.completed_cells(engine, run_id))
    return _runs[key]


def card_bytes(cfg: DictConfig) -> int | None:
    return None if cfg.card_gib is None else round(float(cfg.card_gib) * GIB)


def cell_task(cfg: DictConfig, cell: Cell, device: str) -> tuple:
    """What the isolated child runs for this cell: a prediction, or a measurement (optionally
    skipping cells predicted not to fit the card)."""
    if cfg.predict:
        return predict_cell, (cell.as_dict(), PredictSettings(cfg.predict_device, card_bytes(cfg)))
    skip_over = None
    if cfg.skip_predicted_oom:
        skip_over = card_bytes(cfg) or environment.device_memory_bytes(device)
    settings = MeasureSettings(device, cfg.measure.warmup_steps, cfg.measure.steps, skip_over)
    return measure_cell, (cell.as_dict(), settings)


def should_run(previous: str | None, rerun: str) -> bool:
    return previous is None or rerun == "all" or (rerun == "failed" and previous in RETRYABLE)


def builder_presets(builder) -> list[str] | None:
    """Presets a builder declares (its own `presets`, or its module's PRESETS); None when it declares none."""
    if hasattr(builder, "presets"):
        presets = builder.presets
    else:
        presets = getattr(importlib.import_module(builder.__module__), "PRESETS", None)
    return list(presets) if presets is not None else None


def shape_tokens(cell: Cell) -> int | None:
    """Tokens of the cell's shape, when the family can resolve its presets."""
    builder = import_builder(cell.builder)
    resolve = getattr(builder, "resolve_shape", None) or getattr(importlib.import_module(builder.__module__),
                                                                   "resolve_shape", None)
    try:
        return getattr(resolve(cell.preset, **cell.shape), "tokens", None) if resolve else None
    except Exception:  # noqa: BLE001 - a label, never a reason to lose a cell
        return None


def execute(cfg: DictConfig) -> dict:
    """Run (or skip) one cell and record it. Never raises for an outcome of the cell itself."""
    cell = cell_from_config(cfg)
    state = run_state(cfg)
    previous = state.done.get(cell.key)
    summary = {"cell": cell.describe(), "key": cell.key, "mode": cell.mode, "preset": cell.preset}
    if not should_run(previous, cfg.run.rerun):
        return {**summary, "status": previous, "skipped": True}
    try:
        cell.checkpoint_config()
    except ValueError as error:
        result = CellResult(Status.INVALID, str(error))
    else:
        task, args = cell_task(cfg, cell, state.device)
        result = run_isolated(task, args, cfg.measure.timeout_s, cell.builder.rpartition(".")[0])
    store.record_cell(state.engine, state.run_id, cell.as_dict(), cell.key, result,
                      worker=environment.worker_identity(state.device), tokens=shape_tokens(cell))
    state.done[cell.key] = result.status
    return {**summary, "skipped": False, "status": str(result.status), "reason": result.reason,
            "sec_per_step": result.sec_per_step, "peak_bytes": result.peak_bytes, "wall_s": result.timings.get("wall_s")}


@hydra.main(config_path=CONFIG_PATH, config_name="config", version_base=None)
def hydra_app(cfg: DictConfig) -> dict:
    return execute(cfg)


# The config keys `validate` reads: jobs that differ only in other keys need no separate check.
VALIDATED_KEYS = ("family", "preset", "training", "db", "run", "sweep", "predict", "predict_device", "card_gib",
                  "skip_predicted_oom", "device", "dtype", "quantization", "launcher")


def expand_jobs(config: DictConfig) -> tuple[int, list[DictConfig]] | None:
    """The number of jobs a basic-sweeper multirun will run, and one composed config for every
    distinct combination of the validated keys (composing each of hundreds of jobs takes seconds)."""
    if "BasicSweeper" not in str(config.hydra.sweeper.get("_target_", "")):
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    loader = GlobalHydra.instance().config_loader()
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(params + list(config.hydra.overrides.task))
    total = sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None))
    relevant = [o for o in parsed if o.get_key_element().lstrip("+~").split(".")[0] in VALIDATED_KEYS]
    combinations = [job for batch in BasicSweeper.split_arguments(relevant, None) for job in batch]
    return total, [loader.load_sweep_config(config, list(job)) for job in combinations]


def validate(jobs: list[DictConfig]) -> None:
    """Problems that would make cells fail for a reason of the sweep's own making, named up front."""
    problems = []
    for url in sorted({str(job.db.url) for job in jobs}):
        try:
            store.open_store(url).dispose()
        except store.StoreError as error:
            problems.append(str(error))
    for job in jobs:
        if job.run.rerun not in RERUN_CHOICES:
            problems.append(f"run.rerun must be one of {', '.join(RERUN_CHOICES)}, got {job.run.rerun!r}")
        target = str(job.family.get("_target_"))
        try:
            builder = import_builder(target)
        except (ImportError, AttributeError, ValueError) as error:
            problems.append(f"family {job.family.name}: cannot import builder {target!r} ({error})")
            continue
        presets = builder_presets(builder)
        if presets is not None and str(job.preset) not in presets:
            problems.append(f"family {job.family.name}: unknown preset {job.preset!r}; valid presets: {', '.join(presets)}")
        if job.training not in ("lora", "frozen", "full"):
            problems.append(f"unknown training mode {job.training!r}; valid modes: lora, frozen, full")
        problems += prediction_problems(job) + launcher_problems(job)
        if not job.predict:
            problems += device_problems(str(job.device), bool(job.skip_predicted_oom), job.card_gib)
        if job.dtype != "auto" and job.dtype not in DTYPES:
            problems.append(f"unknown dtype {job.dtype!r}; valid: auto, {', '.join(DTYPES)}")
        if job.quantization.name not in QUANTIZATION_NAMES:
            problems.append(f"unknown quantization {job.quantization.name!r}; valid: {', '.join(QUANTIZATION_NAMES)}")
    if problems:
        unique = list(dict.fromkeys(problems))
        raise SweepConfigError("the sweep cannot start:\n  " + "\n  ".join(unique))


def job_value(job: DictConfig, key: str):
    """A key of a composed job config whose value interpolates `${hydra:...}` (run.name)."""
    from hydra.core.hydra_config import HydraConfig

    hydra_config = HydraConfig.instance()
    previous = hydra_config.cfg
    hydra_config.set_config(job)
    try:
        return OmegaConf.select(job, key)
    finally:
        hydra_config.cfg = previous


def launcher_problems(job: DictConfig) -> list[str]:
    target = str(OmegaConf.select(job, "hydra.launcher._target_") or "")
    if "SlurmLauncher" in target and str(job.db.url).startswith("sqlite"):
        return ["launcher=slurm runs cells on many nodes, which cannot share a SQLite file safely: "
                "set db.url to a PostgreSQL URL (postgresql+psycopg://user:password@host/database)"]
    return []


def prediction_problems(job: DictConfig) -> list[str]:
    from ckptlib.predict import DEVICE_MODELS

    problems = []
    if job.predict_device not in DEVICE_MODELS:
        problems.append(f"unknown predict_device {job.predict_device!r}; valid: {', '.join(DEVICE_MODELS)}")
    if job.card_gib is not None:
        try:
            if float(job.card_gib) <= 0:
                raise ValueError
        except (TypeError, ValueError):
            problems.append(f"card_gib must be a positive number of GiB, got {job.card_gib!r}")
    return problems


DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def device_problems(device: str, skip_predicted_oom: bool, card_gib) -> list[str]:
    """A device this machine does not have, named before any cell runs (CUDA left uninitialised)."""
    if not DEVICE_PATTERN.match(device):
        return [f"unknown device {device!r}; valid: auto, cpu, cuda, cuda:N"]
    resolved = environment.resolve_device(device)
    if resolved.startswith("cuda"):
        import torch

        if not torch.backends.cuda.is_built():
            return [f"device={device}, but this torch ({torch.__version__}) was built without CUDA: install a CUDA "
                    f"build of torch, or use device=cpu"]
        visible = gpus.count()
        if gpus.device_index(resolved) >= visible:
            return [f"device={device}, but {visible} GPU(s) are visible to this process (NVML, CUDA_VISIBLE_DEVICES="
                    f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"]
    if skip_predicted_oom and card_gib is None:
        if resolved == "cpu":
            return ["skip_predicted_oom on a CPU needs a card size: set card_gib"]
        gpu = environment.gpu_info(resolved)
        if gpu.get("memory_bytes") is None:
            return [f"skip_predicted_oom needs the card's memory, and NVML cannot tell it for {resolved} "
                    f"({gpu.get('memory_note') or 'no NVML'}): set card_gib"]
    return []


class SweepCallback(Callback):
    """Validates the whole sweep before any cell runs, shows progress, prints the summary."""

    def __init__(self) -> None:
        self.console = Console(stderr=True)
        self.progress = None
        self.task = None
        self.total = None
        self.started = 0.0
        self.counts: Counter = Counter()
        self.results: list[dict] = []  # jobs that ran in this process (the local launcher)
        self.targets: dict[str, set[str]] = {}  # database URL -> run names this sweep writes
        self.since = store.now()

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        expanded = expand_jobs(config)
        checks = [config]
        if expanded is not None:
            self.total, checks = expanded
            try:
                validate(checks)
            except SweepConfigError as error:
                # Hydra turns a callback's exceptions into warnings; SystemExit stops the sweep.
                raise SystemExit(f"ckpt-sweep: {error}") from None
        # Cells may run in other processes or on other nodes (launchers): the summary reads the database.
        self.targets = {}
        for job in checks:
            self.targets.setdefault(str(job.db.url), set()).add(str(job_value(job, "run.name")))
        self.since = store.now()
        self.started = time.perf_counter()
        if self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                     TextColumn("{task.fields[counts]}"), console=self.console,
                                     refresh_per_second=2)
            self.task = self.progress.add_task("cells", total=self.total, counts="")
            self.progress.start()

    def __getstate__(self) -> dict:
        # Launchers ship the callbacks to each job's process (Ray pickles them): a console and a live
        # progress bar stay behind; jobs there print JSON lines.
        return {**self.__dict__, "console": None, "progress": None, "task": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.console = Console(stderr=True)

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        if self.progress is not None:
            cell = cell_from_config(config)
            self.progress.update(self.task, description=cell.describe())

    def on_job_end(self, config: DictConfig, job_return, **kwargs) -> None:
        try:
            result = job_return.return_value
        except Exception as error:  # noqa: BLE001 - the job itself raised (a harness error); show it
            result = {"cell": "?", "status": "error", "reason": str(error), "skipped": False}
        self.results.append(result)
        self.counts["skipped" if result.get("skipped") else result["status"]] += 1
        if self.progress is not None:
            counts = " ".join(f"{k}:{v}" for k, v in sorted(self.counts.items()))
            self.progress.update(self.task, advance=1, counts=counts)
        else:
            print(json.dumps({k: v for k, v in result.items() if v is not None}), flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        if self.progress is not None:
            self.progress.stop()
        from .report import run_matrix, summary_table

        elapsed = time.perf_counter() - self.started
        if self.console.is_terminal and self.results:
            self.console.print(summary_table(self.results))
        counts: Counter = Counter({"skipped": self.counts["skipped"]} if self.counts["skipped"] else {})
        matrices = []
        for url, names in self.targets.items():
            engine = store.open_store(url)
            for run_id, statuses in sorted(store.runs_recorded_since(engine, sorted(names), self.since).items()):
                store.finish_run(engine, run_id)
                counts.update(statuses)
                matrices.append(run_matrix(engine, run_id))
            engine.dispose()
        summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        print(f"{sum(counts.values())} cells in {elapsed:.1f} s: {summary}", file=sys.stderr, flush=True)
        for matrix in matrices:
            print(matrix, flush=True)
