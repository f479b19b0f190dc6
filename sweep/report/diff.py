"""`ckpt-sweep diff A B`: two runs cell by cell, status transitions first (asv-style compare).

A side is a run id or hardware label, optionally `@previous` (each cell's attempt before its
current one) or `@N` (attempt N), in one database or two (`--db-b`). Cells pair up by what they
are (family, preset, tokens, mode, precision, training and any setting that differs from the
defaults), so near-duplicates never cross; a pair measured by different code says so. Where the
sides share run names (hardware labels that both ran the same sweeps), cells pair within runs of
the same name: a sweep that ran on one side only is one line, not a row per cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.table import Table
from scipy.stats import mannwhitneyu
from sqlalchemy import select
from sqlalchemy.engine import Engine

from ckptlib.modes import mode_rank
from sweep.store.database import CellRow, Sample
from sweep.store.query import load_cells, load_runs, select_runs
from sweep.vocabulary import Status

from .matrices import describe_setting, recorded_setting, shared_run_settings, table_unit, variant
from .text import NOT_RUN, UNITS, cell_name, cell_texts

COORDINATES = ["family", "preset", "tokens", "mode", "quantization", "training", "variant"]
FACTOR = 1.1  # asv's default: a change smaller than 10% is not reported as one
ALPHA = 0.05


@dataclass
class Diff:
    label_a: str
    label_b: str
    cells: pd.DataFrame  # one row per coordinate, transitions first
    environment: list[str]  # "key: A vs B" for every environment field that differs
    unit: str = "GiB"  # of the memory figures
    unpaired: list[str] = field(default_factory=list)  # runs of one side that the other did not run
    shared: list[str] = field(default_factory=list)  # run settings every cell of both sides ran with

    @property
    def title(self) -> str:
        return f"{self.label_a} vs {self.label_b}" + (f" (every cell: {', '.join(self.shared)})" if self.shared else "")

    @property
    def transitions(self) -> pd.DataFrame:
        return self.cells[self.cells["transition"] != ""]


@dataclass
class Side:
    cells: pd.DataFrame
    run_ids: list[int]
    samples: dict[int, list[float]]
    environment: dict
    label: str


def _samples(engine: Engine, cell_ids: list[int]) -> dict[int, list[float]]:
    query = select(CellRow.id, Sample.seconds).join(Sample).where(CellRow.id.in_(cell_ids), Sample.warmup.is_(False))
    by_cell: dict[int, list[float]] = {}
    with engine.connect() as connection:
        for cell_id, seconds in connection.execute(query):
            by_cell.setdefault(cell_id, []).append(seconds)
    return by_cell


def _flat_environment(engine: Engine, run_ids: list[int]) -> dict:
    runs = load_runs(engine).set_index("id")
    merged = {}
    for run_id in run_ids:
        for key, value in (runs.loc[run_id, "environment"] or {}).items():
            if isinstance(value, dict):
                merged.update({f"{key}.{k}": v for k, v in value.items()})
            else:
                merged[key] = value
        merged["provenance"] = runs.loc[run_id, "provenance"]
    return merged


def side(engine: Engine, selector: str) -> Side:
    """`RUN`, `RUN@previous` or `RUN@N` (RUN: a run id or hardware label)."""
    run, _, attempt = selector.partition("@")
    if attempt and attempt != "previous" and not attempt.isdigit():
        raise ValueError(f"unknown attempt {attempt!r} in {selector!r}: use RUN@previous or RUN@N")
    run_ids = select_runs(engine, [run])
    cells = load_cells(engine, run_ids, attempt or "current")
    cells = cells.assign(
        variant=[variant(c, m) for c, m in zip(cells["config"], cells["mode"])],
        compile=[recorded_setting(c, "compile") for c in cells["config"]],
    )
    label = cells["hardware"].iloc[0] if not cells.empty else run
    return Side(
        cells,
        run_ids,
        _samples(engine, cells["cell_id"].tolist()),
        _flat_environment(engine, run_ids),
        label + (f" @{attempt}" if attempt else ""),
    )


def _transition(a: str | None, b: str | None, label_a: str, label_b: str) -> str:
    a, b = a or NOT_RUN, b or NOT_RUN
    if a == b:
        return ""
    if a == Status.OK and b == Status.OOM:
        return f"fits on {label_a}, OOM on {label_b}"
    if a == Status.OOM and b == Status.OK:
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


def _code_change(a, b) -> str:
    """'measured by other code' when both cells know the commit that measured them and it differs."""
    commit_a = (a or {}).get("git_commit") if isinstance(a, dict) else None
    commit_b = (b or {}).get("git_commit") if isinstance(b, dict) else None
    if commit_a and commit_b and commit_a != commit_b:
        return f"measured by other code ({commit_a[:8]} vs {commit_b[:8]})"
    return ""


def _figures(frame: pd.DataFrame, column: str) -> pd.Series:
    """A figure column as floats, blank (NaN) where the cell is not ok (an OOM has no sec/step to compare)."""
    return frame[column].astype(float).where(frame["status"] == Status.OK)


def _pair_runs(a: Side, b: Side, label_a: str, label_b: str) -> tuple[list[str], list[str]]:
    """The coordinates cells pair on, and a line per run only one side holds (left out): where the
    sides share a run name, a cell pairs only with one of a run of the same name; two runs of
    different names (`diff 3 7`) pair whole."""
    names_a, names_b = set(a.cells["run_name"]), set(b.cells["run_name"])
    if not names_a & names_b or (len(names_a) == 1 and len(names_b) == 1):
        return COORDINATES, []
    lines = []
    for own, other, label in ((a, names_b, label_a), (b, names_a, label_b)):
        alone = own.cells[~own.cells["run_name"].isin(other)]
        for name, cells in alone.groupby("run_name", sort=True):
            lines.append(f"only on {label}: run {name!r} ({len(cells)} cells)")
        own.cells = own.cells[own.cells["run_name"].isin(other)]
    return ["run_name", *COORDINATES], lines


def diff_runs(engine: Engine, selector_a: str, selector_b: str, engine_b: Engine | None = None) -> Diff:
    a, b = side(engine, selector_a), side(engine_b or engine, selector_b)
    label_a, label_b = a.label, b.label
    if label_a == label_b:
        label_a, label_b = f"{label_a} (A)", f"{label_b} (B)"
    coordinates, unpaired = _pair_runs(a, b, label_a, label_b)
    shared = shared_run_settings(pd.concat([a.cells, b.cells])["config"])
    for cells in (a.cells, b.cells):  # said once, in the title
        cells["variant"] = [variant(c, m, tuple(shared)) for c, m in zip(cells["config"], cells["mode"])]
    unit = table_unit(pd.concat([a.cells, b.cells]))  # MiB when both sides' peaks are small
    for cells in (a.cells, b.cells):
        cells["text"] = cell_texts(cells, unit)
    keep = coordinates + [
        "status",
        "sec_per_step",
        "peak_bytes",
        "samples_per_s",
        "sample_unit",
        "first_step_s",
        "grad_rel_error",
        "compile",
        "text",
        "cell_id",
        "versions",
    ]
    merged = a.cells[keep].merge(b.cells[keep], on=coordinates, how="outer", suffixes=("_a", "_b"))
    merged = merged.assign(
        sec_a=_figures(merged.rename(columns={"status_a": "status"}), "sec_per_step_a"),
        sec_b=_figures(merged.rename(columns={"status_b": "status"}), "sec_per_step_b"),
        peak_a=_figures(merged.rename(columns={"status_a": "status"}), "peak_bytes_a"),
        peak_b=_figures(merged.rename(columns={"status_b": "status"}), "peak_bytes_b"),
    )
    merged["ratio"] = merged["sec_b"] / merged["sec_a"]
    merged["memory_diff"] = (merged["peak_b"] - merged["peak_a"]) / UNITS[unit]
    merged["memory_ratio"] = merged["peak_b"] / merged["peak_a"]
    merged["transition"] = [
        _transition(x if isinstance(x, str) else None, y if isinstance(y, str) else None, label_a, label_b)
        for x, y in zip(merged["status_a"], merged["status_b"])
    ]
    merged["significance"] = [
        _significance(a.samples.get(x), b.samples.get(y), r) if r == r else ""
        for x, y, r in zip(merged["cell_id_a"], merged["cell_id_b"], merged["ratio"])
    ]
    merged["code"] = [_code_change(x, y) for x, y in zip(merged["versions_a"], merged["versions_b"])]
    merged["text_a"] = merged["text_a"].fillna(NOT_RUN)
    merged["text_b"] = merged["text_b"].fillna(NOT_RUN)
    merged = merged.assign(_first=merged["transition"] == "", _mode=merged["mode"].map(mode_rank))
    merged = merged.sort_values(
        ["_first", "family", "tokens", "preset", "quantization", "_mode", "variant"], kind="stable"
    )
    merged = merged.drop(columns=["_first", "_mode"]).reset_index(drop=True)
    environment = [
        f"{key}: {a.environment.get(key, '-')} ({label_a}) vs {b.environment.get(key, '-')} ({label_b})"
        for key in sorted(set(a.environment) | set(b.environment))
        if a.environment.get(key) != b.environment.get(key)
    ]
    words = [describe_setting(s, v) for s, v in shared.items()]
    return Diff(label_a, label_b, merged, environment, unit, unpaired, words)


def _number(value, template: str) -> str:
    return "" if value != value else template.format(value)


def _rate(samples_per_s, unit) -> str:
    """'16.3 images/s', or blank for a cell with no throughput (not ok, published, predicted)."""
    return "" if pd.isna(samples_per_s) else f"{samples_per_s:.3g} {unit}/s"


FIRST_STEP = ("first step", "first_step_s", "{:.2f} s")  # where compilation lands
GRAD_ERROR = ("grad error", "grad_rel_error", "{:.3g}")  # measure.numerics=true


def _optional(diff: Diff) -> list[tuple[str, str, str]]:
    """The columns a diff adds where they say something: the first step's time where a cell was
    compiled, the gradient error where one was measured."""
    frame = diff.cells
    compiled = (frame[["compile_a", "compile_b"]].fillna("none") != "none").to_numpy().any()
    errors = frame[["grad_rel_error_a", "grad_rel_error_b"]].notna().to_numpy().any()
    return [column for column, shown in ((FIRST_STEP, compiled), (GRAD_ERROR, errors)) if shown]


def _row_values(row, optional: list[tuple[str, str, str]]) -> list[str]:
    tokens = "" if pd.isna(row.tokens) else str(int(row.tokens))
    mode = row.mode + (f" ({row.variant})" if row.variant else "")
    change = "; ".join(x for x in (row.transition or row.significance, row.code) if x)
    extra = [
        "" if pd.isna(value) else template.format(value)
        for _, column, template in optional
        for value in (getattr(row, f"{column}_a"), getattr(row, f"{column}_b"))
    ]
    return [
        row.family,
        row.preset,
        tokens,
        mode,
        row.quantization,
        row.text_a,
        row.text_b,
        _rate(row.samples_per_s_a, row.sample_unit_a),
        _rate(row.samples_per_s_b, row.sample_unit_b),
        _number(row.ratio, "{:.4f}"),
        _number(row.memory_diff, "{:+.2f}"),
        _number(row.memory_ratio, "{:.4f}"),
        *extra,
        change,
    ]


def columns(diff: Diff) -> list[str]:
    return [
        "family",
        "preset",
        "tokens",
        "mode",
        "quant",
        diff.label_a,
        diff.label_b,
        f"samples/s {diff.label_a}",
        f"samples/s {diff.label_b}",
        f"time {diff.label_b}/{diff.label_a}",
        f"memory diff {diff.unit}",
        f"memory {diff.label_b}/{diff.label_a}",
        *(f"{heading} {label}" for heading, *_ in _optional(diff) for label in (diff.label_a, diff.label_b)),
        "change",
    ]


def rich_table(diff: Diff) -> Table:
    """The diff as a terminal shows it: a cell's coordinates in one column, samples/s only where a
    cell has throughput, short headings, and only the cell and change columns folding."""
    table = Table(title=diff.title, caption="\n".join(diff.unpaired) or None)
    throughput = diff.cells[["samples_per_s_a", "samples_per_s_b"]].notna().to_numpy().any()
    short = {f"time {diff.label_b}/{diff.label_a}": "time B/A", f"memory diff {diff.unit}": f"B-A {diff.unit}"}
    ratio = f"memory {diff.label_b}/{diff.label_a}"  # the markdown has it; the terminal keeps the difference
    shown = [c for c in columns(diff)[5:] if c != ratio and (throughput or not c.startswith("samples/s"))]
    table.add_column("cell", overflow="fold")
    for column in shown:
        folds = column == "change"
        table.add_column(short.get(column, column), overflow="fold" if folds else "ellipsis", no_wrap=not folds)
    optional = _optional(diff)
    for row in diff.cells.itertuples():
        values = dict(zip(columns(diff), _row_values(row, optional)))
        table.add_row(cell_name(row), *(values[c] for c in shown), style="bold red" if row.transition else None)
    return table


def markdown(diff: Diff, plot: Path | None = None) -> str:
    optional = _optional(diff)
    frame = pd.DataFrame([_row_values(r, optional) for r in diff.cells.itertuples()], columns=columns(diff))
    parts = [f"# Diff: {diff.title}\n", "## Environment differences\n"]
    parts += [f"- {line}" for line in diff.environment] or ["- none recorded"]
    if diff.unpaired:
        parts += ["\n## Runs on one side only (not compared)\n", *(f"- {line}" for line in diff.unpaired)]
    parts.append("\n## Status transitions\n")
    transitions = diff.transitions
    parts += [
        f"- {r.family} {r.preset} {r.mode} {r.quantization}: {r.transition}" for r in transitions.itertuples()
    ] or ["- none"]
    parts += ["\n## Cells\n", frame.to_markdown(index=False, tablefmt="github", disable_numparse=True)]
    if plot is not None:
        parts.append(f"\n![time ratio]({plot.name})")
    return "\n".join(parts) + "\n"


# --fail-on: what makes `diff` exit non-zero, for a CI job that compares a run against a baseline
GATES = {
    "slower": "B's sec/step more than P over A's (unless the samples show it is within the noise)",
    "bigger": "B's peak memory more than P over A's",
    "oom": "a cell ok in A runs out of memory in B",
    "failed": "a cell ok in A ends any other way in B",
}


@dataclass(frozen=True)
class Gate:
    kind: str
    share: float = 0.0  # slower:10% -> 0.10


def parse_gates(text: str) -> list[Gate]:
    """`slower:10%,bigger:5%,oom` as gates; ValueError naming the part that is not one."""
    gates = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, amount = part.partition(":")
        if kind not in GATES:
            raise ValueError(f"--fail-on {part!r}: unknown; valid: {', '.join(GATES)} (slower and bigger take :P%)")
        takes_share = kind in ("slower", "bigger")
        if takes_share != bool(amount):
            need = f"needs a share, e.g. {kind}:10%" if takes_share else "takes no share"
            raise ValueError(f"--fail-on {part!r}: {kind} {need}")
        try:
            share = float(amount.removesuffix("%")) / 100 if amount else 0.0
        except ValueError:
            raise ValueError(f"--fail-on {part!r}: {amount!r} is not a percentage such as 10%") from None
        gates.append(Gate(kind, share))
    if not gates:
        raise ValueError("--fail-on names no gate; valid: " + ", ".join(GATES))
    return gates


def _gate_failure(gate: Gate, row) -> str | None:
    was_ok = row.status_a == Status.OK
    if gate.kind == "oom" and was_ok and row.status_b == Status.OOM:
        return "ok -> OOM"
    if gate.kind == "failed" and was_ok and isinstance(row.status_b, str) and row.status_b != Status.OK:
        return f"ok -> {row.status_b}"
    if gate.kind == "slower" and row.ratio > 1 + gate.share and not row.significance.startswith("not significant"):
        return f"{row.ratio:.2f}x the time"
    if gate.kind == "bigger" and row.memory_ratio > 1 + gate.share:
        return f"{row.memory_ratio:.2f}x the peak"
    return None


def gate_failures(diff: Diff, gates: list[Gate]) -> list[str]:
    """One line per cell that fails a gate, naming the cell and by how much."""
    lines = []
    for row in diff.cells.itertuples():
        found = [f"{gate.kind}: {why}" for gate in gates if (why := _gate_failure(gate, row))]
        if found:
            lines.append(f"{cell_name(row)}: {'; '.join(found)}")
    return lines
