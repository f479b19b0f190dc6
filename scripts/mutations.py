"""Planted one-line bugs, one at a time, against the test files that should catch each.

    python scripts/mutations.py [--only NAME,...] [--list]

Each mutation replaces one exact line fragment in one file (the script refuses to run a mutation
whose fragment is no longer there: it would test nothing), runs its test files with
`pytest -x -n 0`, and restores the file whatever happens. A mutation is caught when pytest fails.
Prints one line per mutation and the catch rate; exits 1 when any got through. Not part of the
default suite: it runs the fast test files once per mutation (minutes).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    original: str
    mutated: str
    tests: tuple[str, ...]


MUTATIONS = [
    Mutation(
        "warmup counted in sec/step",
        "sweep/store/results.py",
        "measured = np.array([seconds for seconds, warmup in samples if not warmup])",
        "measured = np.array([seconds for seconds, warmup in samples])",
        ("tests/sweep/test_measure.py",),
    ),
    Mutation(
        "sec/step the mean, not the median",
        "sweep/store/results.py",
        '"sec_per_step": float(median),',
        '"sec_per_step": float(measured.mean()),',
        ("tests/sweep/test_measure.py",),
    ),
    Mutation(
        "unpack returns the pool buffer's view",
        "ckptlib/offload.py",
        "            parked.reloaded = self._copy_in(parked)\n",
        "            view = parked.host_view()\n            self._copy_in(parked)\n            parked.reloaded = view\n",
        ("tests/ckptlib/test_offload.py",),
    ),
    Mutation(
        "deduplication skipped",
        "ckptlib/offload.py",
        "if hit is not None and hit[0]() is not None and hit[1].users > 0 and hit[1].reloaded is None:",
        "if False:",
        ("tests/ckptlib/test_offload.py",),
    ),
    Mutation(
        "stash depth ignored (the oldest copy never retired)",
        "ckptlib/offload.py",
        "        self._retire_in_flight(self.stash_depth - 1)\n",
        "",
        ("tests/ckptlib/test_offload.py",),
    ),
    Mutation(
        "prefetched reload used before its event",
        "ckptlib/offload.py",
        "            streams.wait(streams.compute(), parked.arrived)\n",
        "",
        ("tests/ckptlib/test_offload.py",),
    ),
    Mutation(
        "prefetch reads the host buffer before its copy finished",
        "ckptlib/offload.py",
        "                    streams.wait(stream, parked.copied)  # NOTE [ Offload ordering ] 4\n",
        "",
        ("tests/ckptlib/test_offload.py",),
    ),
    Mutation(
        "abandoned steps never reclaimed",
        "ckptlib/offload.py",
        "        abandoned = [p for region in self._regions for p in region if p.buffer is not None]",
        "        abandoned = []",
        ("tests/ckptlib/test_offload.py",),
    ),
    Mutation(
        "copy starts before the producing kernels (ordering 1)",
        "ckptlib/offload.py",
        "            streams.wait(copy, streams.record(streams.compute()))  # NOTE [ Offload ordering ] 1\n",
        "",
        ("tests/ckptlib/test_offload_ordering.py",),
    ),
    Mutation(
        "source released before its copy (ordering 2)",
        "ckptlib/offload.py",
        "            streams.wait(streams.compute(), parked.copied)  # NOTE [ Offload ordering ] 2\n",
        "",
        ("tests/ckptlib/test_offload_ordering.py",),
    ),
    Mutation(
        "the host limit ignored",
        "ckptlib/pool.py",
        "        if self.limit_bytes is not None and self.stats.held_bytes + self._one_off_bytes + nbytes > self.limit_bytes:",
        "        if False:",
        ("tests/ckptlib/test_pool.py", "tests/ckptlib/test_offload.py"),
    ),
    Mutation(
        "row labels assumed to lead the table",
        "sweep/report/published.py",
        '            for index, role in roles.items():\n                if not role.startswith("mode:"):\n'
        "                    row[role] = cells[index]",
        '            labels = [role for role in roles.values() if not role.startswith("mode:")]\n'
        "            for position, role in enumerate(labels):\n                if True:\n"
        "                    row[role] = cells[position]",
        ("tests/sweep/test_reports.py",),
    ),
    Mutation(
        "a cell's row and samples in two transactions",
        "sweep/store/database.py",
        "            row.run_id = run_id\n            session.add(row)\n",
        "            row.run_id = run_id\n            samples, row.samples = row.samples, []\n"
        "            session.add(row)\n            session.commit()\n            session.begin()\n"
        "            row.samples = samples\n",
        ("tests/sweep/test_store.py",),
    ),
    Mutation(
        "resume reads every run's cells",
        "sweep/store/database.py",
        "        CellRow.run_id == run_id, CellRow.is_current.is_(True)",
        "        CellRow.is_current.is_(True)",
        ("tests/sweep/test_store.py",),
    ),
    Mutation(
        "a preset and its own params_b edited together",
        "ckptlib/families/image.py",
        '"num_layers": 24,\n                    "num_attention_heads": 24,\n                    "caption_projection_dim": 1536,'
        '\n                    "pos_embed_max_size": 192,\n                },\n                FamilyShape(1024, 1024, '
        "text_tokens=333),\n                2.03,",
        '"num_layers": 20,\n                    "num_attention_heads": 24,\n                    "caption_projection_dim": 1536,'
        '\n                    "pos_embed_max_size": 192,\n                },\n                FamilyShape(1024, 1024, '
        "text_tokens=333),\n                1.70,",
        ("tests/ckptlib/test_families.py::test_real_presets_have_their_published_size",),
    ),
]


def run(mutation: Mutation) -> tuple[bool, float]:
    path = ROOT / mutation.path
    original = path.read_text()
    if original.count(mutation.original) != 1:
        raise SystemExit(f"{mutation.name}: the fragment is not in {mutation.path} exactly once; update the mutation")
    tic = time.perf_counter()
    try:
        path.write_text(original.replace(mutation.original, mutation.mutated))
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *mutation.tests],
            cwd=ROOT,
            capture_output=True,
        )
    finally:
        path.write_text(original)
    return done.returncode != 0, time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated mutation names")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only.split(",")]
    if args.list:
        print("\n".join(f"{m.name}: {m.path} -> {', '.join(m.tests)}" for m in chosen))
        return
    caught = 0
    for mutation in chosen:
        hit, seconds = run(mutation)
        caught += hit
        print(f"{'caught ' if hit else 'MISSED '} {seconds:6.1f} s  {mutation.name} ({mutation.path})", flush=True)
    print(f"{caught} of {len(chosen)} caught ({caught / len(chosen):.0%})")
    sys.exit(0 if caught == len(chosen) else 1)


if __name__ == "__main__":
    main()
