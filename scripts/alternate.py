"""This checkout and, with `--against REV`, a git revision's in a temporary worktree: the
benchmarks measure both alternated in one run, so both see the same host load."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def checkouts(against: str | None) -> Iterator[dict[str, Path]]:
    """{name: checkout root}: this checkout, and `against`'s worktree while the block runs."""
    found = {"this checkout": ROOT}
    with tempfile.TemporaryDirectory() as scratch:
        if against is None:
            yield found
            return
        worktree = Path(scratch) / "against"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), against], cwd=ROOT, check=True)
        try:
            yield {**found, against: worktree}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)
