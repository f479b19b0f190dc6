"""Runs measured elsewhere (a GPU pod's results.db, a colleague's database) copied into this one.

NOTE [ Merging is idempotent ]: a run is the same run when its name, hardware and provenance are
(the runs table's unique key); an attempt of a cell is the same attempt when its cell key and the
moment it was recorded are. Attempts this database lacks are appended with the next attempt numbers,
and each cell's current attempt is then the latest recorded, whichever database measured it. So
merging the same file twice adds nothing, and merging two pods' files into one run keeps both
pods' attempts, the newer one shown. Claims are not copied: they belong to the writers of the
source. The whole merge is one transaction: a failure leaves the target as it was.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, selectinload

from .schema import CellRow, Run, Sample

RUN_FIELDS = ("source", "device", "environment", "config", "started_at", "finished_at")
NUMBERED_HERE = ("id", "run_id", "attempt", "is_current")  # what the target gives a copied attempt
CELL_FIELDS = tuple(c.name for c in CellRow.__table__.columns if c.name not in NUMBERED_HERE)


@dataclass(frozen=True)
class MergedRun:
    name: str
    hardware: str
    provenance: str
    target_id: int
    new: bool  # the run did not exist in the target
    added: int  # attempts copied
    present: int  # attempts the target already had


def _utc(moment: dt.datetime | None) -> dt.datetime | None:
    """SQLite hands back its timestamps without a zone; every one the store writes is UTC."""
    return moment.replace(tzinfo=dt.UTC) if moment is not None and moment.tzinfo is None else moment


def merge_runs(target: Engine, source: Engine, run_ids: Iterable[int] | None = None) -> list[MergedRun]:
    """Copy the runs of `source` (all, or those with the ids given) into `target`; NOTE [ Merging is
    idempotent ]. Raises ValueError naming an id the source does not have, before anything is written."""
    wanted = None if run_ids is None else list(run_ids)
    with Session(source) as reading:
        query = select(Run).options(selectinload(Run.cells).selectinload(CellRow.samples)).order_by(Run.id)
        runs = list(reading.scalars(query if wanted is None else query.where(Run.id.in_(wanted))))
        missing = sorted(set(wanted or ()) - {r.id for r in runs})
        if missing:
            raise ValueError(f"the source has no run with id {', '.join(map(str, missing))}")
        with Session(target) as writing, writing.begin():
            return [_merge_run(writing, run) for run in runs]


def _merge_run(session: Session, run: Run) -> MergedRun:
    into = session.scalar(
        select(Run).where(Run.name == run.name, Run.hardware == run.hardware, Run.provenance == run.provenance)
    )
    new = into is None
    if new:
        into = Run(name=run.name, hardware=run.hardware, provenance=run.provenance, **_fields(run, RUN_FIELDS))
        session.add(into)
        session.flush()
    elif _utc(run.finished_at) and (not into.finished_at or _utc(run.finished_at) > _utc(into.finished_at)):
        into.environment, into.finished_at = run.environment, run.finished_at  # the latest capture
    present = {
        (key, _utc(moment))
        for key, moment in session.execute(
            select(CellRow.cell_key, CellRow.recorded_at).where(CellRow.run_id == into.id)
        )
    }
    added, touched = 0, set()
    for cell in sorted(run.cells, key=lambda c: (_utc(c.recorded_at), c.attempt)):
        if (cell.cell_key, _utc(cell.recorded_at)) in present:
            continue
        attempts = session.scalar(
            select(func.max(CellRow.attempt)).where(CellRow.run_id == into.id, CellRow.cell_key == cell.cell_key)
        )
        copy = CellRow(run_id=into.id, attempt=(attempts or 0) + 1, is_current=False, **_fields(cell, CELL_FIELDS))
        copy.samples = [Sample(step=s.step, seconds=s.seconds, warmup=s.warmup) for s in cell.samples]
        session.add(copy)
        session.flush()
        added += 1
        touched.add(cell.cell_key)
    for key in touched:
        _mark_latest_current(session, into.id, key)
    return MergedRun(run.name, run.hardware, run.provenance, into.id, new, added, len(run.cells) - added)


def _mark_latest_current(session: Session, run_id: int, key: str) -> None:
    rows = session.scalars(select(CellRow).where(CellRow.run_id == run_id, CellRow.cell_key == key)).all()
    latest = max(rows, key=lambda r: (_utc(r.recorded_at), r.attempt))
    for row in rows:
        row.is_current = row is latest


def _fields(row, names: tuple[str, ...]) -> dict:
    return {name: getattr(row, name) for name in names}
