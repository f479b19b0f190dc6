"""Cells as a table other tools read: CSV or JSON, one row per cell (its current attempt), with the
run it belongs to (id, name, hardware, provenance) beside every recorded figure and setting."""

from __future__ import annotations

import json
from typing import IO

import pandas as pd
from sqlalchemy.engine import Engine

from sweep.store.query import load_cells, select_runs

FORMATS = ("csv", "json")
RUN_COLUMNS = ["run_id", "run_name", "hardware", "provenance"]
# columns holding a JSON document: a JSON export nests them, a CSV holds them as JSON text
DOCUMENTS = ("profile", "host_load", "config", "versions", "report")


def exported_cells(engine: Engine, selectors: list[str] | None = None) -> pd.DataFrame:
    """The cells of the selected runs (run ids or hardware labels; default: every run), run first."""
    frame = load_cells(engine, select_runs(engine, selectors) if selectors else None)
    frame = frame.drop(columns=["kind", "device", "cell_id"])
    rest = [c for c in frame.columns if c not in RUN_COLUMNS]
    return frame[RUN_COLUMNS + rest].sort_values(["run_id", "cell_key"], kind="stable").reset_index(drop=True)


def write_cells(frame: pd.DataFrame, fmt: str, out: IO[str]) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    records = [{column: _plain(value) for column, value in row.items()} for row in frame.to_dict(orient="records")]
    if fmt == "json":
        json.dump(records, out, indent=1)
        out.write("\n")
        return
    for record in records:
        for column in DOCUMENTS:
            if record.get(column) is not None:
                record[column] = json.dumps(record[column], sort_keys=True)
    pd.DataFrame(records, columns=list(frame.columns)).to_csv(out, index=False)


def _plain(value):
    """A value as JSON and CSV take it: missing is None, numpy numbers are Python numbers, a time is ISO text."""
    if value is None or (not isinstance(value, (dict, list, str)) and pd.isna(value)):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item"):
        return value.item()
    return value
