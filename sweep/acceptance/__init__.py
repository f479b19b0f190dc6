"""The first-GPU acceptance run: every CUDA path of the project, checked on a real card, in two
invocations that each fit a GPU session (core checks, then studies):

    python scripts/gpu_acceptance.py --out acceptance/                  # core: 246 s on an H200
    python scripts/gpu_acceptance.py --out acceptance/ --part studies   # compile, attention, batch: 97 s

Each check runs in a process group of its own with a hard timeout (its sweeps, fork servers and
cells are stopped with it, the check writing its stack into its log first), so one failure does not
hide the rest. After every check the output folder holds results.db (every measured cell),
summary.md (every check, passed or not yet run), one JSON file and one log per check (the sweeps'
output streams into it). Running the same command again skips the checks that passed and runs the
rest; an invocation stops starting checks when its time budget (--budget-s) is spent. `--device cpu`
runs the same checks tiny; those that need CUDA say so as `skipped`. The exit status is 1 when a
check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sweep.run.stacks import TERMINATE_GRACE_S, dump_stack_on_death, innermost_frame

from . import checks, studies
from .common import SCALES, Check, CheckResult, CheckStatus, Target

CHECKS = {
    "fork_server": Check(checks.fork_server, 180),
    "offload": Check(checks.offload, 240),
    "harness": Check(checks.harness, 360),
    "oom": Check(checks.oom, 180),
    "quantization": Check(checks.quantization, 420),
    "families": Check(checks.families, 300),
    "environment": Check(checks.environment, 120),
    "studies": Check(studies.studies, 540),
}
PARTS = {"core": [name for name in CHECKS if name != "studies"], "studies": ["studies"], "all": list(CHECKS)}
PASSED = (CheckStatus.OK, CheckStatus.SKIPPED)  # a check with one of these is not run again
SUMMARY = "summary.md"
MIN_START_S = 60  # a check is not started with less of the budget left


def run_in_group(command: list[str], log: Path, timeout_s: float) -> int | None:
    """`command` in a process group of its own, output appended to `log`; its exit status, or None
    when it ran past `timeout_s` and the group (its sweeps, fork servers and cells) was stopped:
    SIGTERM, on which a check writes its stack into the log (NOTE [ Where a cell died ] in
    sweep/run/stacks.py), then SIGKILL for what is left after the grace."""
    with log.open("a") as stream:
        process = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=TERMINATE_GRACE_S)
            return None
        finally:
            if process.poll() is None or _group_alive(process.pid):
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def _run_one(name: str, target: Target, out: Path, timeout_s: float) -> CheckResult:
    log = out / "logs" / f"{name}.log"
    command = [sys.executable, "-m", "sweep.acceptance", "--check", name, "--device", target.device]
    command += ["--scale", target.scale, "--out", str(out), "--families", ",".join(target.families)]
    since = log.stat().st_size if log.exists() else 0  # the log holds earlier invocations' runs too
    started = time.perf_counter()
    returncode = run_in_group(command, log, timeout_s)
    seconds = time.perf_counter() - started
    result = out / "checks" / f"{name}.json"
    if returncode is None:
        return CheckResult(name, CheckStatus.FAILED, [stopped_reason(log, since, timeout_s)], seconds=seconds)
    if not result.exists():
        reason = f"the check's process exited with {returncode} before reporting; see logs/{name}.log"
        return CheckResult(name, CheckStatus.FAILED, [reason], seconds=seconds)
    outcome = CheckResult(**json.loads(result.read_text()))
    outcome.seconds = seconds
    return outcome


def stopped_reason(log: Path, since: int, timeout_s: float) -> str:
    """Why a check stopped at its time limit failed, and where its Python was, from the stack it wrote
    into its log from byte `since` on; a process stuck where no signal handler runs writes none."""
    with log.open("rb") as stream:
        stream.seek(since)
        where = innermost_frame(stream.read().decode(errors="replace"))
    stopped = f"no result within {timeout_s:.0f} s (its group was stopped)"
    if where is None:
        return f"{stopped}; where it was ends logs/{log.name}"
    return f"{stopped}, while in {where}; its stack ends logs/{log.name}"


def recorded(out: Path) -> dict[str, CheckResult]:
    """Every check's latest outcome in this folder, from earlier invocations too."""
    found = {}
    for name in CHECKS:
        path = out / "checks" / f"{name}.json"
        if path.exists():
            found[name] = CheckResult(**json.loads(path.read_text()))
    return found


def summary(outcomes: dict[str, CheckResult], target: Target) -> str:
    """Every registered check, in order: its outcome, or that it has not run yet."""
    lines = [
        f"# Acceptance run on {target.device} ({target.scale} scale)",
        "",
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; "
        "every figure below was measured by this run (results.db holds the cells).",
        "",
        "| check | status | seconds | first line |",
        "|---|---|---|---|",
    ]
    for name in CHECKS:
        o = outcomes.get(name)
        lines.append(
            f"| {name} | not run yet | | |"
            if o is None
            else f"| {name} | {o.status} | {o.seconds:.1f} | {(o.details or [''])[0]} |"
        )
    for name, o in ((n, outcomes[n]) for n in CHECKS if n in outcomes):
        lines += ["", f"## {name}: {o.status}", "", *(f"- {line}" for line in o.details)]
        if o.table:
            lines += ["", *o.table]
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu_acceptance", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="cuda (default where CUDA is usable) or cpu")
    parser.add_argument("--out", type=Path, default=Path("acceptance"), help="output folder (default acceptance/)")
    parser.add_argument("--part", choices=PARTS, default="core", help="core (default), studies, or all")
    parser.add_argument("--only", help="comma-separated checks instead of a part: " + ", ".join(CHECKS))
    parser.add_argument("--scale", choices=SCALES, help="docs (default on CUDA) or tiny (default on a CPU)")
    parser.add_argument("--families", default="", help="the families check's families (default: every family)")
    parser.add_argument("--budget-s", type=float, default=480, help="start no check after this many seconds (480)")
    parser.add_argument("--rerun", action="store_true", help="run checks that passed in an earlier invocation too")
    parser.add_argument("--check", help=argparse.SUPPRESS)  # run one check in this process
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    options = parser.parse_args(argv)
    if options.check:  # a check that hangs says where when its time is up
        dump_stack_on_death(sys.stderr)
    from sweep.machine.environment import resolve_device

    device = resolve_device(options.device)
    scale = options.scale or ("docs" if device.startswith("cuda") else "tiny")
    target = Target(device, scale, tuple(f for f in options.families.split(",") if f))
    out = options.out
    if options.check:
        outcome = CHECKS[options.check].run(target, out)
        (out / "checks" / f"{options.check}.json").write_text(json.dumps(outcome.as_dict(), indent=1))
        return 0
    names = options.only.split(",") if options.only else PARTS[options.part]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        parser.error(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    for folder in ("logs", "checks"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    outcomes, failed, deadline = recorded(out), False, time.monotonic() + options.budget_s
    for name in names:
        earlier = outcomes.get(name)
        if earlier is not None and earlier.status in PASSED and not options.rerun:
            print(f"{name:14s} {earlier.status:8s} earlier (--rerun runs it again)", flush=True)
            continue
        left = deadline - time.monotonic()
        if left < MIN_START_S:
            print(f"{name:14s} not run: {max(left, 0):.0f} s of --budget-s left; run the same command to resume")
            continue
        outcome = _run_one(name, target, out, min(CHECKS[name].timeout_s, left))
        (out / "checks" / f"{name}.json").write_text(json.dumps(outcome.as_dict(), indent=1))
        outcomes[name] = outcome
        failed |= outcome.status == CheckStatus.FAILED
        (out / SUMMARY).write_text(summary(outcomes, target))
        print(f"{name:14s} {outcome.status:8s} {outcome.seconds:6.1f} s  {(outcome.details or [''])[0]}", flush=True)
    (out / SUMMARY).write_text(summary(outcomes, target))
    print(f"{out / SUMMARY}")
    return 1 if failed else 0
