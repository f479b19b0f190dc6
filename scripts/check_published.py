#!/usr/bin/env python3
"""Reproduce the docs' published tables by prediction and write reports/published.md: the synthetic
tables (sweep/report/reproduce.py) and SimpleTuner's family tables (sweep/report/reproduce_families.py):

    python scripts/check_published.py                   # about 20 s, and 6 min for the families, on 2 cores
    python scripts/check_published.py --synthetic-only  # the synthetic tables alone
    python scripts/check_published.py --out /tmp/published.md
    python scripts/check_published.py --db pod.db        # GPU measurements of the docs' sweeps from another database
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweep.report import reproduce, reproduce_families  # noqa: E402
from sweep.store.database import open_store  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "published.md")
    parser.add_argument("--synthetic-only", action="store_true", help="leave SimpleTuner's family tables out")
    parser.add_argument("--workers", type=int, default=2, help="families predicted at once")
    parser.add_argument("--db", default=str(ROOT / "results.db"), help="where GPU measurements are read (results.db)")
    options = parser.parse_args()
    cells = reproduce.published_cells()
    print(f"{len(cells)} published synthetic cells; predicting each shape and mode on each GPU's device model")
    predicted = reproduce.predictions(cells, progress=lambda done: print(f"  {done}", flush=True))
    lines = reproduce.report(cells, predicted)
    engine = open_store(options.db, create=False)
    lines += reproduce.measured_report(reproduce.measured_cells(engine), cells, predicted)
    if not options.synthetic_only:
        tables = reproduce_families.published_tables()
        print(f"{len(tables)} published family tables; predicting each modelled family's bf16 modes")
        predicted = reproduce_families.predictions(
            tables, options.workers, progress=lambda heading: print(f"  {heading}", flush=True)
        )
        lines += reproduce_families.report(tables, predicted)
    options.out.write_text("\n".join(lines) + "\n")
    print(options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
