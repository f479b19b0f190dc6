"""`ckpt-sweep plan --verify`: planned schedules measured as cells of one run (`ckpt-sweep run`
with each schedule as a mode config on Hydra's search path), beside the docs' modes that fit."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ckptlib import CheckpointConfig
from ckptlib.planner import Candidate, describe
from ckptlib.quantize import inherited_environment
from ckptlib.units import format_bytes
from sweep.vocabulary import Provenance, Status

from . import VERIFY_ROUNDS, VERIFY_STEPS
from .planning import (
    SCHEDULE_FIELDS,
    PlanResult,
    Request,
    cell_overrides,
    docs_schedules,
    recorded_schedule,
    schedule_key,
)

# NOTE [ Verdicts above the noise ]: on a CPU, and on a shared GPU host, two schedules' step
# times differ from run to run by more than neighbours on the frontier differ from each other. So
# every schedule is measured in several rounds (the run order reversed every other round, so drift
# in the host's load falls on all of them alike), a schedule's time is the median of its rounds, and
# its noise the wider of its rounds' range and its steps' interquartile range. Two schedules are
# told apart only when their times differ by more than the larger of their noises; otherwise the
# verdict says they are within the noise.


@dataclass(frozen=True)
class Timing:
    """One schedule measured in every round: the median of its rounds' sec/step and its noise (s)."""

    status: str
    seconds: float | None = None
    noise: float | None = None
    peak_bytes: int | None = None
    rounds: int = 0

    def apart_from(self, other: Timing) -> bool:
        return abs(self.seconds - other.seconds) > max(self.noise, other.noise)


def top(outcome: PlanResult, count: int = 3) -> list[Candidate]:
    return outcome.plan.fitting(outcome.request.budget_bytes)[:count]


def verify(
    outcome: PlanResult,
    db_url: str,
    run_name: str,
    steps: int = VERIFY_STEPS,
    warmup: int = 2,
    rounds: int = VERIFY_ROUNDS,
) -> list[str]:
    """Measure the top three fitting schedules and the docs' modes predicted to fit, as cells of
    one run per round, and say whether the predicted order held above the noise."""
    chosen = top(outcome)
    budget = outcome.request.budget_bytes
    docs = docs_modes_beside(outcome.plan.fitting(budget), chosen, docs_schedules(outcome.request))
    try:
        measured = measure_rounds(outcome.request, chosen, docs, db_url, run_name, steps, warmup, rounds)
    except RuntimeError as error:
        return [f"verify: {error}"]
    return verdict(chosen, docs, measured, budget)


def docs_modes_beside(
    fitting: list[Candidate], chosen: list[Candidate], docs: dict[str, CheckpointConfig]
) -> list[str]:
    """The docs' modes (`docs`: as wired for the family) among the fitting schedules, less those
    chosen: a docs mode with a chosen schedule is the same cell, measured once under its plan-N name."""
    keys = {schedule_key(c.config) for c in fitting} - {schedule_key(c.config) for c in chosen}
    return [name for name, config in docs.items() if schedule_key(config) in keys]


def measure_rounds(
    request: Request,
    candidates: list[Candidate],
    docs: list[str],
    db_url: str,
    run_name: str,
    steps: int,
    warmup: int,
    rounds: int,
) -> dict[str, Timing]:
    """Every schedule measured in `rounds` runs, the order reversed every other run (NOTE [ Verdicts
    above the noise ])."""
    measured = [
        measure(request, candidates, docs, db_url, run_name, steps, warmup, reverse=bool(r % 2)) for r in range(rounds)
    ]
    return timings(measured)


def timings(measured_rounds: list[dict[str, object]]) -> dict[str, Timing]:
    """Each name's cells over the rounds -> its Timing (NOTE [ Verdicts above the noise ]); a name
    not ok in every round keeps the status of its first round that was not."""
    names = dict.fromkeys(name for measured in measured_rounds for name in measured)
    result = {}
    for name in names:
        rows = [measured.get(name) for measured in measured_rounds]
        failed = [getattr(row, "status", "not recorded") for row in rows if getattr(row, "status", None) != Status.OK]
        if failed:
            result[name] = Timing(failed[0])
            continue
        seconds = [row.sec_per_step for row in rows]
        steps_iqr = statistics.median(row.iqr_s or 0.0 for row in rows)
        result[name] = Timing(
            Status.OK,
            statistics.median(seconds),
            max(max(seconds) - min(seconds), steps_iqr),
            max(row.peak_bytes for row in rows),
            len(rows),
        )
    return result


def measure(
    request: Request,
    candidates: list[Candidate],
    docs: list[str],
    db_url: str,
    run_name: str,
    steps: int,
    warmup: int,
    reverse: bool = False,
) -> dict[str, object]:
    """plan-1 ... plan-N (the candidates) and the docs modes named -> their recorded cell; run in
    that order, or in reverse."""
    from sweep.store.database import open_store
    from sweep.store.query import load_cells, load_runs

    with tempfile.TemporaryDirectory(prefix="ckpt-sweep-plan-") as folder:
        names = mode_files(candidates, Path(folder))
        order = names + docs
        command = [
            sys.executable, "-m", "sweep.cli", "run", "sweep=none", *cell_overrides(request),
            f"mode={','.join(order[::-1] if reverse else order)}",
            f"hydra.searchpath=[file://{folder}]", f"db.url={db_url}", f"run.name={run_name}", "run.rerun=all",
            f"measure.steps={steps}", f"measure.warmup_steps={warmup}",
        ]  # fmt: skip
        # not the CPU settings this process's meta builds set (SDNQ without torch.compile)
        finished = subprocess.run(command, capture_output=True, text=True, env=inherited_environment())
    if finished.returncode != 0:
        tail = (finished.stderr or finished.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"the measured run failed: {tail[0]}")
    engine = open_store(db_url, create=False)
    runs = load_runs(engine)
    runs = runs[(runs["name"] == run_name) & (runs["provenance"] == Provenance.MEASURED)]
    cells = load_cells(engine, [int(runs.sort_values("started_at")["id"].iloc[-1])])
    by_schedule = {schedule_key(recorded_schedule(row.config)): row for row in cells.itertuples()}
    measured = {name: by_schedule.get(schedule_key(c.config)) for name, c in zip(names, candidates)}
    wired = docs_schedules(request)
    measured.update({name: by_schedule.get(schedule_key(wired[name])) for name in docs})
    return {name: row for name, row in measured.items() if row is not None}


def verdict(chosen: list[Candidate], docs: list[str], measured: dict[str, Timing], budget: int) -> list[str]:
    """What the measured schedules say of the plan: each planned schedule against its prediction,
    whether the predicted order held above the noise, and plan-1 against the fastest docs mode that
    fits."""
    names = [f"plan-{rank}" for rank in range(1, len(chosen) + 1)]
    ok = {name: timing for name, timing in measured.items() if timing.status == Status.OK}
    rounds = max((timing.rounds for timing in ok.values()), default=0)
    plural = "s" if rounds != 1 else ""
    lines = [f"verify (measured, median of {rounds} round{plural}, the order reversed every other round):"]
    for name, candidate in zip(names, chosen):
        timing = measured.get(name)
        if name not in ok:
            lines.append(f"  {name} {describe(candidate.config)}: {getattr(timing, 'status', 'not recorded')}")
            continue
        fits = "fits" if timing.peak_bytes <= budget else "OVER the budget"
        lines.append(
            f"  {name} {describe(candidate.config)}: measured {timing.seconds:.4f} s/step (noise "
            f"{timing.noise:.4f}), peak {format_bytes(timing.peak_bytes)} ({fits}); predicted "
            f"{candidate.seconds:.4f} s/step, {format_bytes(candidate.peak_bytes)}"
        )
    if rounds < 2:
        lines.append("  one round: the noise between runs is not measured, so no order is above it")
    order = sorted((n for n in names if n in ok), key=lambda n: ok[n].seconds)
    if len(order) == len(names):
        lines.append(_order_line(names, order, ok))
    fitting_docs = [d for d in docs if d in ok and ok[d].peak_bytes <= budget]
    if fitting_docs and names and names[0] in ok:
        best = min(fitting_docs, key=lambda d: ok[d].seconds)
        pick = ok[names[0]]
        ratio = pick.seconds / ok[best].seconds
        apart = "beyond" if pick.apart_from(ok[best]) else "within"
        lines.append(
            f"  plan-1 against the fastest docs mode that fits ({best}): {ratio:.3f}x its sec/step ({apart} the noise)"
        )
    return lines


def _order_line(predicted: list[str], measured: list[str], ok: dict[str, Timing]) -> str:
    if measured == predicted:
        return "  the predicted order held"
    swapped = [
        (a, b)
        for i, a in enumerate(predicted)
        for b in predicted[i + 1 :]
        if ok[b].seconds < ok[a].seconds and ok[a].apart_from(ok[b])
    ]
    if not swapped:
        return f"  the predicted order held within the noise (measured {', '.join(measured)})"
    pairs = ", ".join(f"{b} before {a}" for a, b in swapped)
    return f"  the predicted order did not hold: {pairs}, beyond the noise"


def mode_files(candidates: list[Candidate], folder: Path) -> list[str]:
    """Each candidate as a mode config (`mode/plan-1.yaml`, ...) in a Hydra search-path folder."""
    (folder / "mode").mkdir(parents=True, exist_ok=True)
    names = []
    for rank, candidate in enumerate(candidates, 1):
        name = f"plan-{rank}"
        config = candidate.config
        values = {"name": name, **{f: getattr(config, f) for f in SCHEDULE_FIELDS}}
        text = "\n".join(f"{k}: {_yaml(v)}" for k, v in values.items())
        (folder / "mode" / f"{name}.yaml").write_text(text + "\n")
        names.append(name)
    return names


def _yaml(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)
