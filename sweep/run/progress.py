"""What a person sees while a sweep runs: validation first, a progress bar (JSON lines when not on a
terminal), and a summary read back from the database at the end (cells may have run in other
processes or on other nodes)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import Engine

from ckptlib.units import format_bytes
from sweep.config.cell import cell_from_config
from sweep.store import database as store
from sweep.vocabulary import RETRYABLE, JobOutcome, Status

from . import interruption, isolation, quiet
from .compose_once import compose_each_job_once
from .cpu_guard import gpu_sweep_warning
from .preflight import SweepConfigError, expand_jobs, job_value, launcher, override_problems, validate

active = None  # the sweep this process is showing (set at its start): for phases and interruptions
# How the end of a sweep shows each run it wrote (engine, run id) -> text: the docs' matrix, set by
# the command line (sweep/cli.py) from sweep.report; None shows the counts only.
render_run: Callable[[Engine, int], str] | None = None


def report_phase(phase: str) -> None:
    """The running cell's phase (from its child), shown beside the cell on the progress bar."""
    if active is not None and active.progress is not None:
        active.progress.update(active.task, description=f"{active.cell} [{phase}]")


def job_ended(job_return) -> None:
    """A job that ran elsewhere (a Ray task, a SLURM array task) ended: the driver counts it and its
    bar advances, as Hydra's per-job callback does for jobs of this process (that callback runs on
    the worker, where there is no bar)."""
    if active is not None:
        active.ended(job_return)


def interrupted() -> str:
    """Put the progress bar away; the one line an interrupted sweep ends with."""
    if active is None:
        return interruption.not_started()
    if active.progress is not None:
        active.progress.stop()
    done = sum(active.counts.values())
    total = f" of {active.total}" if active.total else ""
    where = isolation.interrupted_in()
    running = f"; {active.cell} was running, in {where}" if where else ""
    return f"interrupted after {done}{total} cells{running}; run the same command again to resume"


def summary_table(results: list[dict]) -> Table:
    """The cells this process ran or skipped, one row each."""
    table = Table(title="sweep summary")
    for column in ("cell", "status", "sec/step", "peak", "note"):
        table.add_column(column)
    for r in results:
        ok = r.get("status") == Status.OK and r.get("sec_per_step") is not None
        table.add_row(
            r.get("cell", "?"),
            r.get("status", "?"),
            f"{r['sec_per_step']:.4f}s" if ok else "",
            format_bytes(r["peak_bytes"]) if ok and r.get("peak_bytes") is not None else "",
            (r.get("note") or "skipped (already recorded)") if r.get("skipped") else (r.get("reason") or "")[:80],
        )
    return table


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
        self.notes: Counter = Counter()  # one line each at the end, however many cells it concerns
        self.targets: dict[str, set[str]] = {}  # database URL -> run names this sweep writes
        self.cell = ""  # the running cell, as the progress bar names it
        self.since = store.now()
        self._scrubbed = False  # the first job scrubs Hydra's saved config of passwords
        self.on_worker = False  # a copy a launcher shipped to a job's process (__setstate__)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        # Hydra turns a callback's exceptions into warnings and carries on: a sweep must not start
        # unvalidated, so any error here stops it (SystemExit is not turned into a warning).
        try:
            self._start(config)
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as error:  # noqa: BLE001 - reported, and the sweep stops
            raise SystemExit(f"ckpt-sweep: the sweep cannot start: {type(error).__name__}: {error}") from None

    def _start(self, config: DictConfig) -> None:
        from hydra.core.global_hydra import GlobalHydra

        compose_each_job_once(GlobalHydra.instance().config_loader())
        expanded = expand_jobs(config)
        checks = [config]
        # for the fork server's preload: the first job's builder module and how the jobs train (None:
        # not known before the first job runs); said before validation, which asks the server's
        # children of a builder of one's own (NOTE [ A sweep's own process imports no torch ] in app.py)
        self.first_builder, self.trainings = None, set()
        if expanded is not None:
            self.total, checks = expanded
            first = cell_from_config(checks[0])
            self.first_builder, _ = isolation.fork_server_needs(first.builder, first.training)
            self.trainings = {cell_from_config(job).training for job in checks}
            isolation.fork_server(self.first_builder, self.trainings)
            try:
                validate(checks, override_problems(config))
            except SweepConfigError as error:
                # Hydra turns a callback's exceptions into warnings; SystemExit stops the sweep.
                raise SystemExit(f"ckpt-sweep: {error}") from None
        warning = gpu_sweep_warning(checks, self.total or len(checks))
        if warning:
            print(f"ckpt-sweep: {warning}", file=sys.stderr, flush=True)
        self.targets = {}
        for job in checks:
            self.targets.setdefault(str(job.db.url), set()).add(str(job_value(job, "run.name")))
        self.since = store.now()
        self._scrubbed = False
        self.started = time.perf_counter()
        global active
        active = self
        interruption.say_when_interrupted = interrupted
        self.log = Path(config.hydra.sweep.dir) / "logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        quiet.log_to(str(self.log))
        if self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[counts]}"),
                console=self.console,
                refresh_per_second=2,
            )
            self.task = self.progress.add_task("cells", total=self.total, counts="")
            self.progress.start()
        if self.first_builder and launcher(config) is None:  # Hydra's own: cells are this process's children
            isolation.start_fork_server(self.first_builder, self.trainings)

    def __getstate__(self) -> dict:
        # Launchers ship the callbacks to each job's process (Ray pickles them): a console and a live
        # progress bar stay behind; jobs there print JSON lines.
        return {**self.__dict__, "console": None, "progress": None, "task": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.console = Console(stderr=True)
        self.on_worker = True

    def _scrub_hydra_files(self, config: DictConfig) -> None:
        """Hydra saved the sweep's config, database URL and all, before the first job: no password
        stays in it."""
        saved = Path(str(config.hydra.sweep.dir)) / "multirun.yaml"
        if not saved.exists():
            return
        text = original = saved.read_text()
        for url in self.targets:
            text = text.replace(url, store.redacted(url))
        if text != original:
            saved.write_text(text)

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        if not self._scrubbed:
            self._scrubbed = True
            self._scrub_hydra_files(config)
        self.cell = cell_from_config(config).describe()
        if self.progress is not None:
            self.progress.update(self.task, description=self.cell)

    def on_job_end(self, config: DictConfig, job_return, **kwargs) -> None:
        self.ended(job_return)

    def ended(self, job_return) -> None:
        """A job ended, here (Hydra's callback) or on a worker (job_ended): count it, advance the bar."""
        try:
            result = job_return.return_value
        except Exception as error:  # noqa: BLE001 - the job itself raised (a harness error); show it
            result = {"cell": "?", "status": JobOutcome.ERROR, "reason": str(error), "skipped": False}
        self.results.append(result)
        self.counts[JobOutcome.SKIPPED if result.get("skipped") else result["status"]] += 1
        if result.get("note"):
            self.notes[result["note"]] += 1
        if self.progress is not None:
            counts = " ".join(f"{k}:{v}" for k, v in sorted(self.counts.items()))
            self.progress.update(self.task, advance=1, counts=counts)
        elif not self.on_worker:  # a worker's output reaches the driver's terminal too: the driver says it
            print(json.dumps({k: v for k, v in result.items() if v is not None}), flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        if self.progress is not None:
            self.progress.stop()
        elapsed = time.perf_counter() - self.started
        if self.console.is_terminal and self.results:
            self.console.print(summary_table(self.results))
        counts: Counter = Counter(
            {JobOutcome.SKIPPED: self.counts[JobOutcome.SKIPPED]} if self.counts[JobOutcome.SKIPPED] else {}
        )
        matrices = []
        for url, names in self.targets.items():
            engine = store.open_store(url)
            for run_id, statuses in sorted(store.runs_recorded_since(engine, sorted(names), self.since).items()):
                store.finish_run(engine, run_id)
                counts.update(statuses)
                if render_run is not None:
                    matrices.append(render_run(engine, run_id))
            engine.dispose()
        summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        print(f"{sum(counts.values())} cells in {elapsed:.1f} s: {summary}", file=sys.stderr, flush=True)
        quiet.flush()
        if getattr(self, "log", None) is not None and self.log.exists():
            print(f"third-party messages (torchao, diffusers, ...): {self.log}", file=sys.stderr, flush=True)
        for note, cells in self.notes.items():
            print(f"{cells} cell(s) {note}", file=sys.stderr, flush=True)
        for matrix in matrices:
            print(matrix, flush=True)
        ran = {status: n for status, n in counts.items() if status != JobOutcome.SKIPPED}
        if ran and set(ran) <= set(RETRYABLE):
            raise SystemExit(
                f"ckpt-sweep: every cell of this sweep ended {', '.join(sorted(ran))}; the same command with "
                "run.rerun=failed measures them again"
            )
