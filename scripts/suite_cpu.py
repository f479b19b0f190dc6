"""Where the test suite's CPU goes: run a command (default: the README's pytest) while sampling every
process's CPU time from /proc four times a second, then print the CPU-seconds per kind of process
(test workers, fork servers, `ckpt-sweep run`, g++, Ray, ...) and per test folder of the subprocesses.

    python scripts/suite_cpu.py                       # .venv/bin/pytest
    python scripts/suite_cpu.py .venv/bin/pytest tests/scale

Linux only. A process is seen from its first sample on, so one shorter than a quarter second may be
missed; the kernel's own threads and processes started before the command are left out.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")
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


def sample(seen: dict, stop: threading.Event) -> None:
    """(pid, start tick) -> [cpu seconds, command line, parent pid], until `stop`."""
    while not stop.is_set():
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
                fields = stat[stat.rindex(")") + 2 :].split()
                key = (int(pid), int(fields[19]))
                if key not in seen:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        command = f.read().replace(b"\0", b" ").decode(errors="replace")
                    seen[key] = [0.0, command, int(fields[1])]
                seen[key][0] = (int(fields[11]) + int(fields[12])) / TICK
            except (OSError, ValueError, IndexError):  # the process ended meanwhile
                continue
        stop.wait(SAMPLE_S)


def kind(command: str, parent: str) -> str:
    if "multiprocessing.forkserver import main" in command and "multiprocessing.forkserver" in parent:
        return "cells"  # a fork server's child keeps its command line
    return next((name for name, pattern in KINDS if re.search(pattern, command)), "other")


def main(argv: list[str]) -> int:
    before = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    seen: dict = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(seen, stop), daemon=True)
    sampler.start()
    started = time.perf_counter()
    code = subprocess.call(argv or [".venv/bin/pytest"])
    wall = time.perf_counter() - started
    stop.set()
    sampler.join()
    commands = {pid: command for (pid, _), (_, command, _) in seen.items()}
    totals, counts, tests = collections.Counter(), collections.Counter(), collections.Counter()
    for (pid, _), (cpu, command, parent) in seen.items():
        if pid in before or not command:
            continue
        name = kind(command, commands.get(parent, ""))
        totals[name] += cpu
        counts[name] += 1
        folder = re.search(r"popen-gw\d+/([^/ ]+)", command)
        if folder:
            tests[folder.group(1)] += cpu
    print(f"\nwall {wall:.1f} s, exit {code}; CPU-s by kind of process (processes):")
    for name, cpu in totals.most_common():
        print(f"  {cpu:8.1f}  {counts[name]:5d}  {name}")
    print(f"  {sum(totals.values()):8.1f}         in all")
    print("CPU-s of the processes whose command line names a test's folder (their own, not their children's):")
    for folder, cpu in tests.most_common(15):
        print(f"  {cpu:8.1f}  {folder}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
