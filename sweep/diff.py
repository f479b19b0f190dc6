"""`ckpt-sweep diff A B`: two runs cell by cell, status transitions first (asv-style compare)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.table import Table
from scipy.stats import mannwhitneyu
from sqlalchemy import select
from sqlalchemy.engine import Engine

from .report import load_cells, load_runs, select_runs
from .store import CellRow, Sample
from ckptlib.units import GIB

from .tables import FAMILY_MODES, NOT_RUN, SYNTHETIC_COLUMNS

COORDINATES = ["family", "preset", "tokens", "mode", "quantization", "training"]
MODE_ORDER = [*SYNTHETIC_COLUMNS, *FAMILY_MODES]
FACTOR = 1.1  # asv's default: a change smaller than 10% is not reported as one
ALPHA = 0.05


@dataclass
class Diff:
    label_a: str
    label_b: str
    cells: pd.DataFrame  # one row per coordinate, transitions first
    environment: list[str]  # "key: A -> B" for every environment field that differs

    @property
    def transitions(self) -> pd.DataFrame:
        return self.cells[self.cells["transition"] != ""]


def _samples(engine: Engine, run_ids: list[int]) -> dict[int, list[float]]:
    query = (select(CellRow.id, Sample.seconds).join(Sample)
             .where(CellRow.run_id.in_(run_ids), Sample.warmup.is_(False)))
    by_cell: dict[int, list[float]] = {}
    with engine.connect() as connection:
        for cell_id, seconds in connection.execute(query):
            by_cell.setdefault(cell_id, []).append(seconds)
    return by_cell


def _side(engine: Engine, selector: str) -> tuple[pd.DataFrame, list[int]]:
    run_ids = select_runs(engine, [selector])
    return load_cells(engine, run_ids), run_ids


def _transition(a: str | None, b: str | None, label_a: str, label_b: str) -> str:
    a, b = a or NOT_RUN, b or NOT_RUN
    if a == b:
        return ""
    if a == "ok" and b == "oom":
        return f"fits on {label_a}, OOM on {label_b}"
    if a == "oom" and b == "ok":
        return f"OOM on {label_a}, fits on {label_b}"
    return f"{label_a}: {a}, {label_b}: {b}"


def _significance(a: list[float] | None, b: list[float] | None, ratio: float) -> str:
    if not a or not b:
        return "no samples (published or predicted)"
    if len(a) < 3 or len(b) < 3:
        return "too few samples"
    p_value = mannwhitneyu(a, b, alternative="two-sided").pvalue
    changed = ratio > FACTOR or ratio < 1 / FACTOR
    if changed and p_value < ALPHA:
        return f"{'slower' if ratio > 1 else 'faster'} (p={p_value:.3g})"
    return f"not significant (p={p_value:.3g})"


def _environment_changes(engine: Engine, ids_a: list[int], ids_b: list[int], label_a: str, label_b: str) -> list[str]:
    runs = load_runs(engine).set_index("id")

    def flat(ids) -> dict:
        merged = {}
        for run_id in ids:
            env = runs.loc[run_id, "environment"] or {}
            for key, value in env.items():
                if isinstance(value, dict):
                    merged.update({f"{key}.{k}": v for k, v in value.items()})
                else:
                    merged[key] = value
            merged["provenance"] = runs.loc[run_id, "provenance"]
        return merged

    a, b = flat(ids_a), flat(ids_b)
    return [f"{key}: {a.get(key, '-')} ({label_a}) vs {b.get(key, '-')} ({label_b})"
            for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]


def diff_runs(engine: Engine, selector_a: str, selector_b: str) -> Diff:
    cells_a, ids_a = _side(engine, selector_a)
    cells_b, ids_b = _side(engine, selector_b)
    label_a = cells_a["hardware"].iloc[0] if not cells_a.empty else selector_a
    label_b = cells_b["hardware"].iloc[0] if not cells_b.empty else selector_b
    if label_a == label_b:
        label_a, label_b = f"{label_a} (A)", f"{label_b} (B)"
    samples = _samples(engine, ids_a + ids_b)
    keep = COORDINATES + ["status", "sec_per_step", "peak_bytes", "text", "cell_id"]
    merged = cells_a[keep].merge(cells_b[keep], on=COORDINATES, how="outer", suffixes=("_a", "_b"))
    merged["ratio"] = merged["sec_per_step_b"] / merged["sec_per_step_a"]
    merged["memory_diff_gib"] = (merged["peak_bytes_b"] - merged["peak_bytes_a"]) / GIB
    merged["memory_ratio"] = merged["peak_bytes_b"] / merged["peak_bytes_a"]
    merged["transition"] = [_transition(a if isinstance(a, str) else None, b if isinstance(b, str) else None, label_a, label_b)
                            for a, b in zip(merged["status_a"], merged["status_b"])]
    merged["significance"] = [
        _significance(samples.get(a), samples.get(b), r) if r == r else ""
        for a, b, r in zip(merged["cell_id_a"], merged["cell_id_b"], merged["ratio"])]
    merged["text_a"] = merged["text_a"].fillna(NOT_RUN)
    merged["text_b"] = merged["text_b"].fillna(NOT_RUN)
    mode_rank = {m: i for i, m in enumerate(MODE_ORDER)}
    merged = merged.assign(_first=merged["transition"] == "", _mode=merged["mode"].map(lambda m: mode_rank.get(m, 99)))
    merged = merged.sort_values(["_first", "family", "tokens", "preset", "quantization", "_mode"], kind="stable")
    merged = merged.drop(columns=["_first", "_mode"]).reset_index(drop=True)
    return Diff(label_a, label_b, merged, _environment_changes(engine, ids_a, ids_b, label_a, label_b))


def _row_values(row, diff: Diff) -> list[str]:
    ratio = f"{row.ratio:.4f}" if row.ratio == row.ratio else ""
    memory = f"{row.memory_diff_gib:+.2f}" if row.memory_diff_gib == row.memory_diff_gib else ""
    memory_ratio = f"{row.memory_ratio:.4f}" if row.memory_ratio == row.memory_ratio else ""
    tokens = "" if pd.isna(row.tokens) else str(int(row.tokens))
    return [row.family, row.preset, tokens, row.mode, row.quantization, row.text_a, row.text_b, ratio, memory,
            memory_ratio, row.transition or row.significance]


def columns(diff: Diff) -> list[str]:
    return ["family", "preset", "tokens", "mode", "quant", diff.label_a, diff.label_b,
            f"time {diff.label_b}/{diff.label_a}", "memory diff GiB", f"memory {diff.label_b}/{diff.label_a}", "change"]


def rich_table(diff: Diff) -> Table:
    table = Table(title=f"{diff.label_a} vs {diff.label_b}")
    for column in columns(diff):
        table.add_column(column)
    for row in diff.cells.itertuples():
        table.add_row(*_row_values(row, diff), style="bold red" if row.transition else None)
    return table


def markdown(diff: Diff, plot: Path | None = None) -> str:
    frame = pd.DataFrame([_row_values(r, diff) for r in diff.cells.itertuples()], columns=columns(diff))
    parts = [f"# Diff: {diff.label_a} vs {diff.label_b}\n", "## Environment differences\n"]
    parts += [f"- {line}" for line in diff.environment] or ["- none recorded"]
    parts.append("\n## Status transitions\n")
    transitions = diff.transitions
    parts += [f"- {r.family} {r.preset} {r.mode} {r.quantization}: {r.transition}" for r in transitions.itertuples()] \
        or ["- none"]
    parts += ["\n## Cells\n", frame.to_markdown(index=False, tablefmt="github", disable_numparse=True)]
    if plot is not None:
        parts.append(f"\n![time ratio]({plot.name})")
    return "\n".join(parts) + "\n"
