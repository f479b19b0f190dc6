"""Wall time of `ckpt-sweep plan` for Flux.1 dev LoRA at 1024 px (issue: answers that lead somewhere, fast).

    python scripts/bench_plan_time.py [--against REV] [--rounds 2]

Three commands, each in a fresh interpreter as a user runs them (imports, the meta build, the search
on two workers, the full prediction that checks the pick, the store and the plot): a bf16 base on a
40 GiB card, an int8-torchao base on an RTX 4090, and the user's question as asked (`--card "RTX
4090"` alone: the bf16 base is refused on its weights, then the int8 base is planned). With
`--against REV` a git revision's checkout is timed too, alternated with this one in each round.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alternate import checkouts

CASES = {
    "bf16, 40 GiB": ["--quantization", "none", "--vram", "40"],
    "int8-torchao, RTX 4090": ["--quantization", "int8-torchao", "--card", "RTX 4090"],
    "RTX 4090 as asked": ["--card", "RTX 4090"],
}


def plan_seconds(checkout: Path, options: list[str]) -> tuple[float, str]:
    """(the command's wall seconds, its recommendation line)."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [sys.executable, "-m", "sweep.cli", "plan", "--family", "flux1", "--preset", "dev", *options]
        command += ["--db", f"{scratch}/plan.db", "--out", scratch]
        tic = time.perf_counter()
        done = subprocess.run(command, cwd=checkout, check=True, capture_output=True, text=True)
        seconds = time.perf_counter() - tic
    picked = next((line for line in done.stdout.splitlines() if line.startswith("recommended:")), "no recommendation")
    return seconds, picked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", help="a git revision timed too, alternated with this checkout")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    times: dict[tuple[str, str], list[float]] = {}
    with checkouts(args.against) as found:
        for round_ in range(args.rounds):
            for case, options in CASES.items():
                for name, checkout in found.items():
                    seconds, picked = plan_seconds(checkout, options)
                    times.setdefault((case, name), []).append(seconds)
                    print(f"round {round_ + 1}, {case}, {name}: {seconds:.1f} s; {picked}", flush=True)
    print("\n| command | " + " | ".join(f"{name} (median s)" for name in found) + " | ratio |")
    print("|---|" + "---|" * len(found) + "---|")
    for case in CASES:
        medians = [statistics.median(times[case, name]) for name in found]
        ratio = f"{medians[0] / medians[1]:.2f}" if len(medians) > 1 else ""
        print(f"| {case} | " + " | ".join(f"{m:.1f}" for m in medians) + f" | {ratio} |")


if __name__ == "__main__":
    main()
