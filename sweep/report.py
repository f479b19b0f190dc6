"""Result matrices in the docs' format, from the results database."""
from __future__ import annotations

import math

import pandas as pd
from rich.table import Table
from sqlalchemy import select
from sqlalchemy.engine import Engine

from .store import CellResult, Run

GIB = 2 ** 30
NOISE_THRESHOLD = 0.10  # IQR / median above this marks a cell as noisy
NOISY_MARK = " ~"
STATUS_TEXT = {"oom": "OOM", "failed": "failed", "unsupported": "unsupported", "timeout": "timeout",
               "crashed": "crashed", "invalid": "invalid"}
NOT_RUN = "not run"
# The docs' column names for the synthetic sweep, in the docs' order.
SYNTHETIC_COLUMNS = {"none": "No checkpoint", "torch-ffn": "Torch FFN", "unsloth-ffn": "Unsloth FFN",
                     "layer": "Torch layer", "unsloth": "Unsloth layer"}
FAMILY_MODE_ORDER = ["none", "activation-offload", "layer", "interval2", "seg2-stride4", "seg2-stride4-offload",
                     "unsloth", "torch-ffn", "unsloth-ffn"]


def cell_text(status: str, sec_per_step: float | None, peak_bytes: int | None, iqr_s: float | None = None) -> str:
    """`0.0166s / 4.43 GiB`, or the status word; ` ~` marks IQR/median over 10%."""
    if status != "ok":
        return STATUS_TEXT.get(status, status)
    noisy = iqr_s is not None and sec_per_step and not math.isnan(iqr_s) and iqr_s / sec_per_step > NOISE_THRESHOLD
    return f"{sec_per_step:.4f}s / {peak_bytes / GIB:.2f} GiB" + (NOISY_MARK if noisy else "")


def load_cells(engine: Engine, run_ids: list[int] | None = None) -> pd.DataFrame:
    query = select(CellResult, Run.hardware, Run.name.label("run_name"), Run.provenance).join(Run)
    if run_ids is not None:
        query = query.where(CellResult.run_id.in_(run_ids))
    columns = ["run_id", "family", "preset", "mode", "quantization", "training", "tokens", "status", "reason",
               "sec_per_step", "iqr_s", "peak_bytes"]
    with engine.connect() as connection:
        rows = connection.execute(query).mappings().all()
    frame = pd.DataFrame([{**{c: row[CellResult.__table__.c[c]] for c in columns},
                           "hardware": row["hardware"], "run_name": row["run_name"], "provenance": row["provenance"]}
                          for row in rows], columns=columns + ["hardware", "run_name", "provenance"])
    frame["text"] = [cell_text(r.status, r.sec_per_step, r.peak_bytes, r.iqr_s) for r in frame.itertuples()]
    return frame


def synthetic_matrix(cells: pd.DataFrame) -> pd.DataFrame:
    """Rows GPU x Tokens, columns the docs' mode names; absent combinations read `not run`."""
    cells = cells[cells["mode"].isin(list(SYNTHETIC_COLUMNS))].copy()
    cells["column"] = cells["mode"].map(SYNTHETIC_COLUMNS)
    matrix = cells.pivot_table(index=["hardware", "tokens"], columns="column", values="text", aggfunc="last")
    columns = [c for c in SYNTHETIC_COLUMNS.values() if c in matrix.columns or True]
    matrix = matrix.reindex(columns=columns).fillna(NOT_RUN)
    matrix.index = matrix.index.set_names(["GPU", "Tokens"])
    return matrix.reset_index()


def to_markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def run_matrix(engine: Engine, run_id: int) -> str:
    cells = load_cells(engine, [run_id])
    if cells.empty:
        return "(no cells recorded)"
    parts = []
    synthetic = cells[cells["family"] == "synthetic"]
    if not synthetic.empty:
        parts.append(to_markdown(synthetic_matrix(synthetic)))
    for family, group in cells[cells["family"] != "synthetic"].groupby("family"):
        matrix = group.pivot_table(index=["hardware", "preset", "quantization"], columns="mode", values="text", aggfunc="last")
        order = [m for m in FAMILY_MODE_ORDER if m in matrix.columns] + sorted(set(matrix.columns) - set(FAMILY_MODE_ORDER))
        parts.append(f"{family}\n\n" + to_markdown(matrix.reindex(columns=order).fillna(NOT_RUN).reset_index()))
    return "\n\n".join(parts)


def summary_table(results: list[dict]) -> Table:
    table = Table(title="sweep summary")
    for column in ("cell", "status", "sec/step", "peak", "note"):
        table.add_column(column)
    for r in results:
        ok = r.get("status") == "ok" and r.get("sec_per_step") is not None
        table.add_row(r.get("cell", "?"), r.get("status", "?"),
                      f"{r['sec_per_step']:.4f}s" if ok else "",
                      f"{r['peak_bytes'] / GIB:.3f} GiB" if ok and r.get("peak_bytes") is not None else "",
                      "skipped (already recorded)" if r.get("skipped") else (r.get("reason") or "")[:80])
    return table
