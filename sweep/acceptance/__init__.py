"""The first-GPU acceptance run: every CUDA path of the project, checked once on a real card.

    python scripts/gpu_acceptance.py [--device cuda|cpu] [--out DIR] [--only CHECK,...]

Each check runs in its own process with a hard timeout, so one failure does not hide the rest;
the output folder gets results.db (every measured cell), summary.md, one JSON file and one log per
check. On a CPU (`--device cpu`) the same checks run at tiny scale, and those that need CUDA say
so as `skipped` with the reason. The exit status is 1 when a check failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

from .checks import CHECKS, Outcome

SUMMARY = "summary.md"


def _run_one(name: str, device: str, out: Path) -> Outcome:
    timeout_s = CHECKS[name].timeout_s
    log, result = out / "logs" / f"{name}.log", out / "checks" / f"{name}.json"
    started = time.perf_counter()
    with log.open("w") as stream:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "sweep.acceptance", "--check", name, "--device", device, "--out", str(out)],
                stdout=stream,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return Outcome(
                name,
                "failed",
                [f"no result within {timeout_s} s (killed); see logs/{name}.log"],
                seconds=time.perf_counter() - started,
            )
    if not result.exists():
        return Outcome(
            name,
            "failed",
            [f"the check's process exited with {done.returncode} before reporting; see logs/{name}.log"],
            seconds=time.perf_counter() - started,
        )
    outcome = Outcome(**json.loads(result.read_text()))
    outcome.seconds = time.perf_counter() - started
    return outcome


def summary(outcomes: list[Outcome], device: str) -> str:
    lines = [
        f"# Acceptance run on {device}",
        "",
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; "
        "every figure below was measured by this run (results.db holds the cells).",
        "",
        "| check | status | seconds | first line |",
        "|---|---|---|---|",
    ]
    lines += [f"| {o.name} | {o.status} | {o.seconds:.1f} | {(o.details or [''])[0]} |" for o in outcomes]
    for o in outcomes:
        lines += ["", f"## {o.name}: {o.status}", "", *(f"- {line}" for line in o.details)]
        if o.table:
            lines += ["", *o.table]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_acceptance", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="cuda (default where CUDA is usable) or cpu")
    parser.add_argument("--out", type=Path, help="output folder (default acceptance-<time>)")
    parser.add_argument("--only", help="comma-separated checks: " + ", ".join(CHECKS))
    parser.add_argument("--check", help=argparse.SUPPRESS)  # run one check in this process
    options = parser.parse_args(argv)
    from sweep.environment import resolve_device

    device = resolve_device(options.device)
    out = options.out or Path(f"acceptance-{dt.datetime.now():%Y%m%d-%H%M%S}")
    if options.check:
        outcome = CHECKS[options.check].run(device, out)
        (out / "checks" / f"{options.check}.json").write_text(json.dumps(outcome.as_dict(), indent=1))
        return 0
    names = options.only.split(",") if options.only else list(CHECKS)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        parser.error(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    for folder in ("logs", "checks"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    outcomes = []
    for name in names:
        outcome = _run_one(name, device, out)
        outcomes.append(outcome)
        print(f"{name:14s} {outcome.status:8s} {outcome.seconds:6.1f} s  {(outcome.details or [''])[0]}", flush=True)
    (out / SUMMARY).write_text(summary(outcomes, device))
    print(f"{out / SUMMARY}")
    return 1 if any(o.status == "failed" for o in outcomes) else 0
