"""What every acceptance check shares: where it runs (`Target`), what it returns (`CheckResult`), and the
sweeps it runs through `ckpt-sweep run` into the acceptance database."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from sweep.vocabulary import Provenance

RUN = "acceptance"  # the prefix of every run name the checks write
SCALES = ("docs", "tiny")  # the docs' shapes (a GPU), or tiny ones (a CPU, or the suite)


@dataclass(frozen=True)
class Target:
    """The device the checks run on and the scale of their shapes."""

    device: str  # cpu, cuda, cuda:N
    scale: str  # docs | tiny
    families: tuple[str, ...] = ()  # the families check's families (empty: every family)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def tiny(self) -> bool:
        return self.scale == "tiny"


class CheckStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"  # the device cannot run it (a CUDA check on a CPU), with the reason


@dataclass
class CheckResult:
    name: str
    status: str  # a CheckStatus
    details: list[str] = field(default_factory=list)
    table: list[str] = field(default_factory=list)  # markdown lines
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Check:
    run: Callable[[Target, Path], CheckResult]
    timeout_s: int  # on a GPU at the docs' scale, with room: a hang detector, not an estimate


def one_line(reason: str | None) -> str:
    """A cell's reason as one line of a summary (tracebacks and compiler messages span many)."""
    return (reason or "").strip().split("\n", 1)[0]


def verdict(name: str, problems: list[str], details: list[str], **extra) -> CheckResult:
    return CheckResult(name, CheckStatus.FAILED if problems else CheckStatus.OK, problems + details, **extra)


def sweep_cli(out: Path, *overrides: str) -> int:
    """`ckpt-sweep run` into the acceptance database, in this check's process (its sweeps share one
    fork server); the output goes to this check's log. Returns its exit status."""
    from sweep import cli

    argv = [
        "run",
        f"db.url=sqlite:///{out.resolve() / 'results.db'}",
        f"hydra.sweep.dir={out.resolve() / 'multirun'}",
        *overrides,
    ]
    print("$ ckpt-sweep", " ".join(argv), flush=True)
    saved = sys.argv
    try:
        cli.main(argv)
    except SystemExit as exit:
        return exit.code if isinstance(exit.code, int) else 1
    finally:
        sys.argv = saved
        sys.stdout.flush()
    return 0


def exited(returncode: int) -> list[str]:
    """A problem line for a sweep that did not exit cleanly; its output is in the check's log."""
    return [] if returncode == 0 else [f"ckpt-sweep run exited with {returncode} (its output is in the check's log)"]


def cells(out: Path, run: str, provenance: str = Provenance.MEASURED) -> list[dict]:
    with sqlite3.connect(out / "results.db") as connection:
        connection.row_factory = sqlite3.Row
        rows = connection.execute(
            "select c.*, r.hardware as hardware from cells c join runs r on r.id = c.run_id "
            "where r.name = ? and r.provenance = ? order by c.id",
            (run, provenance),
        ).fetchall()
    return [
        {**dict(row), "config": json.loads(row["config"]), "timings": json.loads(row["timings"] or "{}")}
        for row in rows
    ]
