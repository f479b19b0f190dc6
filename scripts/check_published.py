#!/usr/bin/env python3
"""Reproduce the docs' published synthetic tables by prediction and write reports/published.md
(sweep/report/reproduce.py):

    python scripts/check_published.py              # about 20 s on 2 cores
    python scripts/check_published.py --out /tmp/published.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweep.report.reproduce import predictions, published_cells, report  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "published.md")
    options = parser.parse_args()
    cells = published_cells()
    print(f"{len(cells)} published cells; predicting each shape and mode on each GPU's device model")
    predicted = predictions(cells, progress=lambda done: print(f"  {done}", flush=True))
    options.out.write_text("\n".join(report(cells, predicted)) + "\n")
    print(options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
