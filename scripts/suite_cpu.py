"""Where the test suite's CPU goes: run a command (default: the README's pytest) while sampling every
process's CPU time from /proc four times a second, then print the CPU-seconds per kind of process
(test workers, fork servers, `ckpt-sweep run`, g++, Ray, ...) and, for pytest, per test file and per
test: the worker's own CPU in the test plus every process started while it ran (the plugin
scripts/suite_cpu_plugin.py names the test in their environment).

    python scripts/suite_cpu.py                       # .venv/bin/pytest
    python scripts/suite_cpu.py .venv/bin/pytest tests/scale
    CKPT_SUITE_CPU_RAW=raw.json python scripts/suite_cpu.py   # and every process and test seen, as JSON

Linux only. A process is seen from its first sample on, so one shorter than a quarter second may be
missed; the kernel's own threads and processes started before the command are left out.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from suite_cpu_plugin import LOG_VARIABLE, TEST_VARIABLE

TICK = os.sysconf("SC_CLK_TCK")
# where to write what was seen, as JSON: every process (pid, cpu_s, command, parent, test), every test
# (test, cpu_s, worker, start, end) and the machine's busy cores at each sample (time, busy)
RAW_VARIABLE = "CKPT_SUITE_CPU_RAW"
SAMPLE_S = 0.25
# (kind, pattern on the command line), first match wins
KINDS = [
    ("test workers", r"exec\(eval\(sys\.stdin"),
    ("fork servers", r"multiprocessing\.forkserver import main"),
    ("`ckpt-sweep run`", r"sweep\.cli|bin/ckpt-sweep"),
    ("acceptance checks", r"sweep\.acceptance"),
    ("g++ (Inductor)", r"cc1plus|g\+\+|collect2|\bld\b|\bas\b"),
    ("Ray", r"raylet|gcs_server|ray/|ray::|ray\.util"),
    ("SLURM tasks", r"submitit"),
    ("PostgreSQL", r"postgres"),
]


def busy_seconds() -> float:
    """CPU-seconds the machine has spent outside idle and iowait since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / TICK


def sample(seen: dict, busy: list, stop: threading.Event) -> None:
    """(pid, start tick) -> [cpu seconds, command line, parent pid], and (time, busy cores since the
    last sample) onto `busy`, until `stop`."""
    last = (time.time(), busy_seconds())
    while not stop.is_set():
        now = (time.time(), busy_seconds())
        if now[0] > last[0]:
            busy.append((now[0], (now[1] - last[1]) / (now[0] - last[0])))
        last = now
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
                fields = stat[stat.rindex(")") + 2 :].split()
                key = (int(pid), int(fields[19]))
                if key not in seen:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        command = f.read().replace(b"\0", b" ").decode(errors="replace")
                    seen[key] = [0.0, command, int(fields[1]), started_in(pid)]
                seen[key][0] = (int(fields[11]) + int(fields[12])) / TICK
            except (OSError, ValueError, IndexError):  # the process ended meanwhile
                continue
        stop.wait(SAMPLE_S)


def started_in(pid: str) -> str:
    """The test during which the process was started ("" when none was running, or not pytest)."""
    prefix = f"{TEST_VARIABLE}=".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            found = [entry for entry in f.read().split(b"\0") if entry.startswith(prefix)]
    except OSError:
        return ""
    return found[0][len(prefix) :].decode(errors="replace") if found else ""


# A forked child keeps its parent's command line: (its kind, its parent's kind) -> what it is
FORKED = {
    ("fork servers", "fork servers"): "cells",
    ("fork servers", "test workers"): "test workers' fork servers",
    ("test workers", "test workers"): "test workers' forks (process pools)",
}


def kind(command: str, parent: str) -> str:
    def matched(line: str) -> str:
        return next((name for name, pattern in KINDS if re.search(pattern, line)), "other")

    own = matched(command)
    return FORKED.get((own, matched(parent)), own)


def print_top(cpu_by_test: collections.Counter, group, count: int) -> None:
    grouped = collections.Counter()
    for test, cpu in cpu_by_test.items():
        grouped[group(test)] += cpu
    for name, cpu in grouped.most_common(count):
        print(f"  {cpu:8.1f}  {name}")


def print_busy(busy: list, started: float, wall: float, parts: int = 10) -> None:
    """How many cores were busy on average in each tenth of the run: an idle tail shows here."""
    sums, counts = [0.0] * parts, [0] * parts
    for at, cores in busy:
        part = min(parts - 1, max(0, int((at - started) / wall * parts)))
        sums[part] += cores
        counts[part] += 1
    means = (f"{s / c:.2f}" if c else "-" for s, c in zip(sums, counts))
    print(f"busy cores in each tenth of the run (of {os.cpu_count()}): " + " ".join(means))


def main(argv: list[str]) -> int:
    argv = argv or [".venv/bin/pytest"]
    log = Path(tempfile.mkstemp(prefix="suite-cpu-", suffix=".jsonl")[1])
    env = {**os.environ, LOG_VARIABLE: str(log)}
    if Path(argv[0]).name == "pytest":
        argv = [argv[0], "-p", "suite_cpu_plugin", *argv[1:]]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")]))
    before = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    seen: dict = {}
    busy: list = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(seen, busy, stop), daemon=True)
    sampler.start()
    started = time.time()
    code = subprocess.call(argv, env=env)
    wall = time.time() - started
    stop.set()
    sampler.join()
    commands = {pid: command for (pid, _), (_, command, _, _) in seen.items()}
    totals, counts, others = collections.Counter(), collections.Counter(), collections.Counter()
    by_test = collections.Counter()  # the worker's own CPU in each test, then what it started
    tests = [json.loads(line) for line in log.read_text().splitlines()]
    for record in tests:
        by_test[record["test"]] += record["cpu_s"]
    log.unlink()
    for (pid, _), (cpu, command, parent, test) in seen.items():
        if pid in before or not command:
            continue
        name = kind(command, commands.get(parent, ""))
        totals[name] += cpu
        if name == "other":
            others[command] += cpu
        counts[name] += 1
        if test and name != "test workers":
            by_test[test] += cpu
    if raw := os.environ.get(RAW_VARIABLE):
        rows = [
            {"pid": pid, "cpu_s": cpu, "command": command, "parent": commands.get(parent, ""), "test": test}
            for (pid, _), (cpu, command, parent, test) in seen.items()
            if pid not in before and command
        ]
        Path(raw).write_text(json.dumps({"processes": rows, "tests": tests, "busy": busy}))
    print(f"\nwall {wall:.1f} s, exit {code}; CPU-s by kind of process (processes):")
    for name, cpu in totals.most_common():
        print(f"  {cpu:8.1f}  {counts[name]:5d}  {name}")
    print(f"  {sum(totals.values()):8.1f}         in all")
    print("CPU-s of the other processes, by command line:")
    print_top(others, lambda command: command[:120], 8)
    print_busy(busy, started, wall)
    if by_test:
        print("CPU-s by test file (the worker's own in its tests, and every process they started):")
        print_top(by_test, lambda test: test.split("::")[0], 15)
        print("CPU-s by test, its parameters together:")
        print_top(by_test, lambda test: re.sub(r"\[.*", "", test), 20)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
