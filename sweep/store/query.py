"""Recorded runs and cells read back as pandas frames: which runs a report or diff means, and the
cells of those runs (the current attempt of each, or an earlier one), with their table text."""

from __future__ import annotations

import pandas as pd
from sqlalchemy import case, func, select, tuple_
from sqlalchemy.engine import Engine

from sweep.config.builders import SHAPE_COLUMNS
from sweep.vocabulary import Provenance, Status

from .database import CellRow, Run

CELL_COLUMNS = [
    "run_id",
    "cell_key",
    "attempt",
    "family",
    "preset",
    "mode",
    "quantization",
    "training",
    *SHAPE_COLUMNS,
    "status",
    "reason",
    "sec_per_step",
    "first_step_s",
    "settle_steps",
    "samples_per_s",
    "attention_backend",
    "loss_rel_error",
    "grad_rel_error",
    "profile",
    "iqr_s",
    "peak_bytes",
    "host_offload_peak_bytes",
    "host_load",
    "config",
    "versions",
    "report",
]


def load_runs(engine: Engine) -> pd.DataFrame:
    with engine.connect() as connection:
        rows = (
            connection.execute(
                select(
                    Run.id,
                    Run.name,
                    Run.hardware,
                    Run.provenance,
                    Run.source,
                    Run.device,
                    Run.started_at,
                    Run.environment,
                )
            )
            .mappings()
            .all()
        )
    return pd.DataFrame(
        [dict(r) for r in rows],
        columns=["id", "name", "hardware", "provenance", "source", "device", "started_at", "environment"],
    )


def run_summaries(engine: Engine) -> pd.DataFrame:
    """Every run, oldest first: id, name, hardware, provenance, its cells (current attempts) and how
    many of them are ok, when it started."""
    ok = func.sum(case((CellRow.status == Status.OK, 1), else_=0))
    query = (
        select(
            Run.id,
            Run.name,
            Run.hardware,
            Run.provenance,
            func.count(CellRow.id).label("cells"),
            func.coalesce(ok, 0).label("ok"),
            Run.started_at,
        )
        .outerjoin(CellRow, (CellRow.run_id == Run.id) & CellRow.is_current.is_(True))
        .group_by(Run.id)
        .order_by(Run.id)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).mappings().all()
    return pd.DataFrame(
        [dict(r) for r in rows], columns=["id", "name", "hardware", "provenance", "cells", "ok", "started_at"]
    )


def select_runs(engine: Engine, selectors: list[str] | None = None) -> list[int]:
    """Run ids for selectors (run ids or hardware labels); by default the latest run of every
    (sweep name, hardware, provenance)."""
    runs = load_runs(engine)
    if runs.empty:
        raise ValueError("the database holds no runs yet (record some with `ckpt-sweep run` or `ckpt-sweep import`)")
    if not selectors:
        latest = runs.sort_values("started_at").groupby(["name", "hardware", "provenance"]).tail(1)
        return sorted(latest["id"].tolist())
    chosen = []
    for selector in selectors:
        if selector.isdigit() and int(selector) in set(runs["id"]):
            chosen.append(int(selector))
            continue
        matching = runs[runs["hardware"] == selector]
        if matching.empty:
            known = ", ".join(sorted(set(runs["hardware"]))) or "(none)"
            raise ValueError(f"no run with id or hardware {selector!r}; hardware in the database: {known}")
        latest = matching.sort_values("started_at").groupby(["name", "provenance"]).tail(1)
        chosen.extend(latest["id"].tolist())
    return sorted(set(chosen))


INTEGER_COLUMNS = (
    "attempt",
    "tokens",
    "text_tokens",
    "height",
    "width",
    "frames",
    "batch",
    "peak_bytes",
    "host_offload_peak_bytes",
    "settle_steps",
)


def _attempts(attempt: str):
    """Which attempt of each cell: the current one, the one before it (`previous`), or number N."""
    if attempt == "current":
        return CellRow.is_current.is_(True)
    if attempt == "previous":
        earlier = (
            select(CellRow.run_id, CellRow.cell_key, func.max(CellRow.attempt).label("attempt"))
            .where(CellRow.is_current.is_(False))
            .group_by(CellRow.run_id, CellRow.cell_key)
            .subquery()
        )
        return tuple_(CellRow.run_id, CellRow.cell_key, CellRow.attempt).in_(
            select(earlier.c.run_id, earlier.c.cell_key, earlier.c.attempt)
        )
    return CellRow.attempt == int(attempt)


def load_cells(engine: Engine, run_ids: list[int] | None = None, attempt: str = "current") -> pd.DataFrame:
    query = (
        select(
            CellRow.id.label("cell_id"),
            *(getattr(CellRow, c) for c in CELL_COLUMNS),
            Run.hardware,
            Run.name.label("run_name"),
            Run.provenance,
            Run.device,
        )
        .join(Run)
        .where(_attempts(attempt))
    )
    if run_ids is not None:
        query = query.where(CellRow.run_id.in_(run_ids))
    with engine.connect() as connection:
        rows = connection.execute(query).mappings().all()
    frame = pd.DataFrame(
        [dict(r) for r in rows], columns=["cell_id", *CELL_COLUMNS, "hardware", "run_name", "provenance", "device"]
    )
    frame = frame.astype({column: "Int64" for column in INTEGER_COLUMNS})
    frame["predicted_bytes"] = pd.array(_predictions_for(engine, frame), dtype="Int64")
    frame["kind"] = [device_kind(d) for d in frame["device"]]
    return frame


def device_kind(device: str | None) -> str:
    """cuda / cpu from a run's device ('cuda:1', 'predicted:cuda'); published tables are GPU tables."""
    if not isinstance(device, str) or not device:  # published runs record no device (NaN in a frame)
        return "cuda"
    return device.removeprefix("predicted:").split(":")[0].split("-")[0]  # cuda-pre-hopper: a cuda model


def _predictions_for(engine: Engine, frame: pd.DataFrame) -> list[float | None]:
    """For each cell that did not run to a figure (OOM, unsupported, ...), the latest prediction of
    the same cell on the same kind of device; None elsewhere. Predicted cells carry their own."""
    query = (
        select(CellRow.cell_key, CellRow.peak_bytes, Run.device)
        .join(Run)
        .where(Run.provenance == Provenance.PREDICTED, CellRow.peak_bytes.is_not(None))
        .order_by(CellRow.recorded_at)
    )
    with engine.connect() as connection:
        latest = {(key, device_kind(device)): peak for key, peak, device in connection.execute(query)}

    def prediction(cell) -> float | None:
        if cell.status == Status.OK:
            return None
        if cell.provenance == Provenance.PREDICTED:
            return cell.peak_bytes
        return latest.get((cell.cell_key, device_kind(cell.device)))

    return [prediction(cell) for cell in frame.itertuples()]
