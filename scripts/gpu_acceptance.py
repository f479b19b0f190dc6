#!/usr/bin/env python3
"""The first-GPU acceptance run (see sweep/acceptance/__init__.py), in two invocations on a GPU:

python scripts/gpu_acceptance.py --out acceptance/                    # the core checks, on cuda
python scripts/gpu_acceptance.py --out acceptance/ --part studies     # then the studies
python scripts/gpu_acceptance.py --device cpu --out /tmp/acceptance   # the same checks, tiny, on a CPU
"""

import os
import sys
from pathlib import Path

# Run from a checkout without installing it: this process and the checks' processes import it.
ROOT = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

from sweep.acceptance import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
