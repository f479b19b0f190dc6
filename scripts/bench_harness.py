"""Harness overhead per cell: everything but the warmup and measured steps.

    python scripts/bench_harness.py [--cells 12]

Runs one multirun of tiny synthetic cells (each still in its own child process) into a scratch
database, then reads per cell: wall time seen by the parent (fork, build, apply, steps, result
hand-back, teardown) minus the sum of its step samples. The first cell also pays the fork
server's start (torch, peft imported once) and is reported separately.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "bench.db"
        tokens = ",".join(str(16 + i) for i in range(args.cells))
        command = [
            sys.executable,
            "-m",
            "sweep.cli",
            "run",
            "sweep=none",
            "preset=tiny",
            "mode=layer",
            f"+shape.tokens={tokens}",
            "measure.warmup_steps=1",
            "measure.steps=2",
            f"db.url=sqlite:///{db}",
            f"hydra.sweep.dir={scratch}/multirun",
        ]
        tic = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
        total = time.perf_counter() - tic
        with create_engine(f"sqlite:///{db}").connect() as connection:
            rows = connection.execute(
                text(
                    "select c.wall_s, sum(s.seconds) from cells c join samples s on s.cell_id = c.id "
                    "group by c.id order by c.recorded_at"
                )
            ).all()
    overheads = [wall - steps for wall, steps in rows]
    print(f"{len(rows)} cells, whole command {total:.1f} s (interpreter start, Hydra, fork server included)")
    print(f"first cell overhead {overheads[0]:.3f} s (starts the fork server)")
    rest = overheads[1:]
    print(f"other cells: median overhead {statistics.median(rest):.3f} s, max {max(rest):.3f} s (target <= 0.5 s)")


if __name__ == "__main__":
    main()
