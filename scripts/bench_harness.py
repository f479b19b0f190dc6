"""Harness overhead per cell: everything but the warmup and measured steps.

    python scripts/bench_harness.py [--cells 12] [--warmup-steps 2] [--against REV] [--rounds 2]

Runs one multirun of tiny synthetic cells (each still in its own child process; with `--own-model`,
cells of the model `ckpt-sweep new-family` writes, run from its folder as a user runs theirs) into a
scratch database, then reads per cell: wall time seen by the parent (fork, build, apply, steps, result
hand-back, teardown) minus the sum of its step samples. The first cell also pays the fork
server's start (torch, peft imported once) and is reported separately. With two warmup steps or more
a cell watches its last warmup step for its attention kernels and CPU peak (NOTE [ What the last
warmup step watches ] in sweep/run/scenarios/measure.py); with one it runs two passes of its own.

`--against REV` measures a git revision's checkout (a temporary worktree) too, alternated with this
one for `--rounds` rounds, so both see the same host load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alternate import checkouts
from sqlalchemy import create_engine, text


def measure(checkout: Path, cells: int, warmup_steps: int, own_model: bool) -> tuple[float, list[float]]:
    """(the whole command's seconds, each cell's overhead in recorded order) of one sweep run from `checkout`."""
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "bench.db"
        tokens = ",".join(str(16 + i) for i in range(cells))
        cli = [sys.executable, "-m", "sweep.cli"]
        where = {"cwd": checkout}
        family = ["preset=tiny"]
        if own_model:  # from the model's folder, the checkout importable as an installed package is
            where = {"cwd": scratch, "env": {**os.environ, "PYTHONPATH": str(checkout)}}
            subprocess.run([*cli, "new-family", "my_model"], **where, check=True, capture_output=True)
            family = ["family.name=mine", "family._target_=my_model.build", "preset=small"]
        command = [
            *cli,
            "run",
            "sweep=none",
            *family,
            "mode=layer",
            f"+shape.tokens={tokens}",
            f"measure.warmup_steps={warmup_steps}",
            "measure.steps=2",
            f"db.url=sqlite:///{db}",
            f"hydra.sweep.dir={scratch}/multirun",
        ]
        tic = time.perf_counter()
        subprocess.run(command, **where, check=True, capture_output=True)
        total = time.perf_counter() - tic
        with create_engine(f"sqlite:///{db}").connect() as connection:
            rows = connection.execute(
                text(
                    "select c.wall_s, sum(s.seconds) from cells c join samples s on s.cell_id = c.id "
                    "group by c.id order by c.recorded_at"
                )
            ).all()
    return total, [wall - steps for wall, steps in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=12)
    parser.add_argument("--warmup-steps", type=int, default=2, help="per cell (default 2; the harness's is 5)")
    parser.add_argument("--against", help="a git revision measured too, alternated with this checkout")
    parser.add_argument("--rounds", type=int, default=2, help="alternations with --against (default 2)")
    parser.add_argument("--own-model", action="store_true", help="cells of a new-family model, not synthetic")
    args = parser.parse_args()
    with checkouts(args.against) as found:
        for round_ in range(args.rounds if args.against else 1):
            for name, checkout in found.items():
                total, overheads = measure(checkout, args.cells, args.warmup_steps, args.own_model)
                rest = overheads[1:]
                print(
                    f"round {round_ + 1}, {name}: {len(overheads)} cells, whole command {total:.1f} s; first cell "
                    f"overhead {overheads[0]:.3f} s (starts the fork server); other cells: median overhead "
                    f"{statistics.median(rest):.3f} s, max {max(rest):.3f} s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
