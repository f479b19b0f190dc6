"""`ckpt-sweep report`: the docs' matrices regenerated from the database, as markdown under reports/."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.table import Table
from sqlalchemy import select
from sqlalchemy.engine import Engine

from ckptlib.units import GIB

from .store import CellRow, Run
from .tables import (
    FAMILY_MODES,
    NOT_RUN,
    QUANTIZATION_ORDER,
    SYNTHETIC_COLUMNS,
    cell_text,
    splice,
    wrap,
)

CELL_COLUMNS = ["run_id", "cell_key", "family", "preset", "mode", "quantization", "training", "tokens", "status", "reason",
                "sec_per_step", "iqr_s", "peak_bytes", "host_offload_peak_bytes"]


def load_runs(engine: Engine) -> pd.DataFrame:
    with engine.connect() as connection:
        rows = connection.execute(select(Run.id, Run.name, Run.hardware, Run.provenance, Run.source, Run.device,
                                         Run.started_at, Run.environment)).mappings().all()
    return pd.DataFrame([dict(r) for r in rows],
                        columns=["id", "name", "hardware", "provenance", "source", "device", "started_at", "environment"])


def select_runs(engine: Engine, selectors: list[str] | None = None) -> list[int]:
    """Run ids for selectors (run ids or hardware labels); by default the latest run of every
    (sweep name, hardware, provenance)."""
    runs = load_runs(engine)
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


def load_cells(engine: Engine, run_ids: list[int] | None = None) -> pd.DataFrame:
    query = select(CellRow.id.label("cell_id"), *(getattr(CellRow, c) for c in CELL_COLUMNS), Run.hardware,
                   Run.name.label("run_name"), Run.provenance, Run.device).join(Run)
    if run_ids is not None:
        query = query.where(CellRow.run_id.in_(run_ids))
    with engine.connect() as connection:
        rows = connection.execute(query).mappings().all()
    frame = pd.DataFrame([dict(r) for r in rows],
                         columns=["cell_id", *CELL_COLUMNS, "hardware", "run_name", "provenance", "device"])
    frame["predicted_bytes"] = _predictions_for(engine, frame)
    frame["text"] = [cell_text(r.status, r.sec_per_step, r.peak_bytes, r.iqr_s, r.predicted_bytes)
                     for r in frame.itertuples()]
    return frame


def _device_kind(device: str | None) -> str:
    """cuda / cpu from a run's device ('cuda:1', 'predicted:cuda'); published tables are GPU tables."""
    return (device or "cuda").removeprefix("predicted:").split(":")[0]


def _predictions_for(engine: Engine, frame: pd.DataFrame) -> list[float | None]:
    """For each cell that did not run to a figure (OOM, unsupported, ...), the latest prediction of
    the same cell on the same kind of device; None elsewhere. Predicted cells carry their own."""
    query = (select(CellRow.cell_key, CellRow.peak_bytes, Run.device).join(Run)
             .where(Run.provenance == "predicted", CellRow.peak_bytes.is_not(None))
             .order_by(CellRow.recorded_at))
    with engine.connect() as connection:
        latest = {(key, _device_kind(device)): peak for key, peak, device in connection.execute(query)}

    def prediction(cell) -> float | None:
        if cell.status == "ok":
            return None
        if cell.provenance == "predicted":
            return cell.peak_bytes
        return latest.get((cell.cell_key, _device_kind(cell.device)))

    return [prediction(cell) for cell in frame.itertuples()]


@dataclass
class Matrix:
    table_id: str
    family: str
    sweep: str
    title: str
    frame: pd.DataFrame
    sources: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        return self.frame.to_markdown(index=False, tablefmt="github", disable_numparse=True)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _sources(cells: pd.DataFrame) -> list[str]:
    pairs = cells[["hardware", "provenance"]].drop_duplicates().itertuples(index=False)
    return [f"{hardware}: {provenance}" for hardware, provenance in pairs]


def synthetic_matrix(cells: pd.DataFrame) -> pd.DataFrame:
    """Rows GPU (x Tokens when the sweep has several), columns the docs' mode names; gaps read `not run`."""
    cells = cells.assign(column=cells["mode"].map(lambda m: SYNTHETIC_COLUMNS.get(m, m)),
                         quantization=pd.Categorical(cells["quantization"], _quantization_order(cells), ordered=True))
    rows = ["hardware", *(axis for axis in ("tokens", "quantization") if cells[axis].nunique(dropna=True) > 1)]
    matrix = cells.pivot_table(index=rows, columns="column", values="text", aggfunc="last", observed=True)
    extra = sorted(set(matrix.columns) - set(SYNTHETIC_COLUMNS.values()))
    matrix = matrix.reindex(columns=[*SYNTHETIC_COLUMNS.values(), *extra]).astype(object).fillna(NOT_RUN)
    matrix.columns.name = None
    return matrix.reset_index().rename(columns={"hardware": "GPU", "tokens": "Tokens", "quantization": "precision"})


def _quantization_order(cells: pd.DataFrame) -> list[str]:
    present = set(cells["quantization"])
    return [q for q in QUANTIZATION_ORDER if q in present] + sorted(present - set(QUANTIZATION_ORDER))


def family_matrix(cells: pd.DataFrame) -> pd.DataFrame:
    """Rows precision/quantization (docs order), columns modes (docs order)."""
    matrix = cells.pivot_table(index="quantization", columns="mode", values="text", aggfunc="last")
    columns = [m for m in FAMILY_MODES if m in matrix.columns] + sorted(set(matrix.columns) - set(FAMILY_MODES))
    matrix = matrix.reindex(index=_quantization_order(cells), columns=columns).astype(object).fillna(NOT_RUN)
    matrix.columns.name = None
    return matrix.reset_index().rename(columns={"quantization": "precision"})


def build_matrices(cells: pd.DataFrame) -> list[Matrix]:
    matrices = []
    for (family, sweep), group in cells.groupby(["family", "run_name"], sort=True):
        if family == "synthetic":
            matrices.append(Matrix(f"{family}/{sweep}", family, sweep, f"{family}: {sweep}",
                                   synthetic_matrix(group), _sources(group)))
            continue
        for (hardware, preset), part in group.groupby(["hardware", "preset"], sort=True):
            matrices.append(Matrix(f"{family}/{sweep}/{_slug(hardware)}/{preset}", family, sweep,
                                   f"{family}: {sweep}, {preset} on {hardware}", family_matrix(part), _sources(part)))
    return matrices


def family_notes(family: str) -> list[str]:
    """What ckptlib's registry says about a family: its docs name, what a block is, its gaps."""
    from ckptlib.families import all_families

    entry = all_families().get(family)
    if entry is None:
        return []
    notes = [f"Docs family: {entry.docs_name}" + (f" (`{entry.cls}`)" if entry.cls else "") + "."]
    notes += [f"Blocks: {entry.blocks_note}."] if entry.blocks_note else []
    notes += [f"Not offered: {what}: {why}." for what, why in entry.reasons.items()]
    notes += [f"Unsupported: {entry.unsupported}."] if entry.unsupported else []
    return notes


def family_page(family: str, matrices: list[Matrix], plots: dict[str, list[Path]], out_dir: Path) -> str:
    parts = [f"# {family}\n", *(f"{note}\n" for note in family_notes(family)),
             "Each cell: post-warmup sec/step / peak GiB, or a status. `~` marks IQR/median "
             "over 10%. CPU rows are tracked live tensor bytes on the CPU, not GPU memory.\n"]
    for matrix in matrices:
        parts.append(f"## {matrix.title}\n")
        parts.append("Sources: " + "; ".join(matrix.sources) + "\n")
        parts.append(wrap(matrix.table_id, matrix.markdown()) + "\n")
        for plot in plots.get(matrix.table_id, []):
            parts.append(f"![{plot.stem}]({plot.relative_to(out_dir).as_posix()})\n")
    return "\n".join(parts)


def write_reports(engine: Engine, out_dir: Path, selectors: list[str] | None = None, with_plots: bool = True) -> list[Path]:
    """reports/<family>.md per family, reports/index.md, and plots; returns the files written."""
    run_ids = select_runs(engine, selectors)
    cells = load_cells(engine, run_ids)
    matrices = build_matrices(cells)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, plots = [], {}
    if with_plots:
        from .plots import matrix_plots

        plots = matrix_plots(cells, matrices, out_dir / "plots")
        written += [p for paths in plots.values() for p in paths]
    index = ["# ckpt-sweep reports\n", "Regenerated by `ckpt-sweep report` from the results database.\n",
             "| family | tables | runs |", "|---|---|---|"]
    for family in sorted({m.family for m in matrices}):
        family_matrices = [m for m in matrices if m.family == family]
        page = out_dir / f"{family}.md"
        page.write_text(family_page(family, family_matrices, plots, out_dir))
        written.append(page)
        sources = sorted({s for m in family_matrices for s in m.sources})
        index.append(f"| [{family}]({page.name}) | {len(family_matrices)} | {'; '.join(sources)} |")
    (out_dir / "index.md").write_text("\n".join(index) + "\n")
    written.append(out_dir / "index.md")
    return written


def splice_document(engine: Engine, document: Path, selectors: list[str] | None = None) -> list[str]:
    """Replace the marked blocks of an existing docs file in place; returns the table ids replaced."""
    matrices = {m.table_id: m.markdown() for m in build_matrices(load_cells(engine, select_runs(engine, selectors)))}
    text, replaced = splice(document.read_text(), matrices)
    document.write_text(text)
    return replaced


def run_matrix(engine: Engine, run_id: int) -> str:
    cells = load_cells(engine, [run_id])
    if cells.empty:
        return "(no cells recorded)"
    return "\n\n".join(f"{m.title}\n\n{m.markdown()}" for m in build_matrices(cells))


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
