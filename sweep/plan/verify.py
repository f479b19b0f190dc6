"""`ckpt-sweep plan --verify`: planned schedules measured as cells of one run (`ckpt-sweep run`
with each schedule as a mode config on Hydra's search path), beside the docs' modes that fit."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from ckptlib import MODES
from ckptlib.planner import Candidate, describe
from ckptlib.quantize import inherited_environment
from ckptlib.units import format_bytes
from sweep.vocabulary import Provenance, Status

from .planning import SCHEDULE_FIELDS, PlanResult, Request, recorded_schedule, schedule_key


def top(outcome: PlanResult, count: int = 3) -> list[Candidate]:
    return outcome.plan.fitting(outcome.request.budget_bytes)[:count]


def verify(outcome: PlanResult, db_url: str, run_name: str, steps: int = 5, warmup: int = 2) -> list[str]:
    """Measure the top three fitting schedules and the docs' modes predicted to fit, as cells of
    one run, and say whether the predicted order held."""
    chosen = top(outcome)
    budget = outcome.request.budget_bytes
    fitting = {schedule_key(c.config) for c in outcome.plan.fitting(budget)}
    planned = {schedule_key(c.config) for c in chosen}
    # a docs mode with a planned schedule is the same cell: measured once, under its plan-N name
    docs = [n for n, config in MODES.items() if schedule_key(config) in fitting - planned]
    try:
        measured = measure(outcome.request, chosen, docs, db_url, run_name, steps, warmup)
    except RuntimeError as error:
        return [f"verify: {error}"]
    return verdict(chosen, docs, measured, budget)


def measure(
    request: Request, candidates: list[Candidate], docs: list[str], db_url: str, run_name: str, steps: int, warmup: int
) -> dict[str, object]:
    """plan-1 ... plan-N (the candidates, in order) and the docs modes named -> their recorded cell."""
    from sweep.store.database import open_store
    from sweep.store.query import load_cells, load_runs

    with tempfile.TemporaryDirectory(prefix="ckpt-sweep-plan-") as folder:
        names = mode_files(candidates, Path(folder))
        command = [
            sys.executable, "-m", "sweep.cli", "run", "sweep=none", *_family_overrides(request),
            f"preset={request.preset}", f"training={request.training}",
            f"quantization={request.quantization}", f"mode={','.join(names + docs)}",
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
    measured.update({name: by_schedule.get(schedule_key(MODES[name])) for name in docs})
    return {name: row for name, row in measured.items() if row is not None}


def verdict(chosen: list[Candidate], docs: list[str], measured: dict, budget: int) -> list[str]:
    """What the measured cells say of the plan: each planned schedule against its prediction,
    whether the predicted order held, and plan-1 against the fastest docs mode that fits."""
    names = [f"plan-{rank}" for rank in range(1, len(chosen) + 1)]
    ok = {name: row for name, row in measured.items() if row.status == Status.OK}
    lines = ["verify (measured, same run):"]
    for name, candidate in zip(names, chosen):
        row = measured.get(name)
        if name not in ok:
            lines.append(f"  {name} {describe(candidate.config)}: {getattr(row, 'status', 'not recorded')}")
            continue
        fits = "fits" if row.peak_bytes <= budget else "OVER the budget"
        lines.append(
            f"  {name} {describe(candidate.config)}: measured {row.sec_per_step:.4f} s/step, peak "
            f"{format_bytes(row.peak_bytes)} ({fits}); predicted {candidate.seconds:.4f} s/step, "
            f"{format_bytes(candidate.peak_bytes)}"
        )
    order = sorted((n for n in names if n in ok), key=lambda n: ok[n].sec_per_step)
    if len(order) == len(names):
        held = order == names
        lines.append(
            "  the predicted order held" if held else f"  the predicted order did not hold: {', '.join(order)}"
        )
    fitting_docs = [d for d in docs if d in ok and ok[d].peak_bytes <= budget]
    if fitting_docs and names and names[0] in ok:
        best = min(fitting_docs, key=lambda d: ok[d].sec_per_step)
        ratio = ok[names[0]].sec_per_step / ok[best].sec_per_step
        lines.append(f"  plan-1 against the fastest docs mode that fits ({best}): {ratio:.3f}x its sec/step")
    return lines


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


def _family_overrides(request: Request) -> list[str]:
    from ckptlib.families import all_families

    if request.family == "synthetic" or request.family in all_families():
        return [f"family={request.family}"]
    return [f"family._target_={request.builder}", f"family.name={request.family}"]
