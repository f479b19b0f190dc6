"""The docs' matrices from recorded cells: rows hardware (x tokens x precision) or precision, columns
modes in the docs' order, one text per cell.

Nothing is hidden: a setting that tells two cells of one row and column apart (interval, stride,
training, LoRA rank, dtype, a shape override, ...) goes into the column heading, and so does any
checkpointing setting that differs from the mode's preset (`Torch layer (interval 3)`). A cell that
did not run to a figure carries its reason as a numbered footnote under the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ckptlib.modes import MODES
from ckptlib.plan import describe_blocks
from ckptlib.quantize import precision_label
from ckptlib.units import unit_for
from sweep.config.cell import FIELDS, LABELS, LATER_FIELDS, default, differing, setting_label
from sweep.vocabulary import Provenance, Status

from .text import BUSY_LOAD, BUSY_MARK, NOISY_MARK, NOT_RUN, QUANTIZATION_ORDER, SYNTHETIC_COLUMNS, cell_texts, slug

# Cell settings (keys of the recorded cell config) and how a heading names their value.
# The settings a heading may name: checkpointing settings (against the mode's preset) and run
# settings (against their defaults; training only where it differs between cells of one row).
CHECKPOINT_SETTINGS = LABELS["checkpoint"]
RUN_SETTINGS = {"training": FIELDS["training"].metadata["label"], **LABELS["run"]}
FOOTNOTED = (Status.UNSUPPORTED, Status.FAILED, Status.CRASHED, Status.TIMEOUT, Status.INVALID, Status.HOST_OOM)


@dataclass
class Matrix:
    table_id: str
    family: str
    sweep: str
    title: str
    frame: pd.DataFrame
    sources: list[str] = field(default_factory=list)
    footnotes: list[str] = field(default_factory=list)
    legend: str = ""  # what a cell says and what its marks mean
    shared: list[str] = field(default_factory=list)  # what every cell shares, as the title says it

    def markdown(self) -> str:
        table = self.frame.to_markdown(index=False, tablefmt="github", disable_numparse=True)
        notes = [f"[{i}] {note}" for i, note in enumerate(self.footnotes, 1)]
        return "\n".join([table, "", self.legend, *([""] + notes if notes else [])])


def _sources(cells: pd.DataFrame) -> list[str]:
    pairs = cells[["hardware", "provenance"]].drop_duplicates().itertuples(index=False)
    return [f"{hardware}: {provenance}" for hardware, provenance in pairs]


def _settings(config) -> dict:
    """The settings of one recorded cell that a heading may need (published cells record few; a
    cell the harness recorded before a setting existed ran at its default, as its key says)."""
    config = config if isinstance(config, dict) else {}
    if "backend" in config:  # a whole cell, as the harness records one
        config = {**LATER_FIELDS, **config}
    values = {k: config.get(k) for k in ("family", *CHECKPOINT_SETTINGS, *RUN_SETTINGS)}  # family: its wiring
    if values["blocks"] is not None:  # an int or (from JSON) a list: one text, to group and sort by
        values["blocks"] = describe_blocks(values["blocks"])
    values.update({f"shape.{k}": v for k, v in (config.get("shape") or {}).items()})
    return values


def describe_setting(setting: str, value) -> str:
    if setting.startswith("shape."):
        return f"{setting.removeprefix('shape.')} {value}"
    return setting_label(setting, value)


def recorded_setting(config, name: str):
    """One run setting of a recorded cell, its default where the cell does not record it (published
    cells and cells recorded before the setting existed)."""
    recorded = config.get(name) if isinstance(config, dict) else None
    return default(name) if recorded is None else recorded


def shared_run_settings(configs) -> dict[str, Any]:
    """The titled run settings (TITLED_RUN_SETTINGS) every one of `configs` records with one value
    other than its default: what a title says once instead of every row."""
    recorded = [_settings(c) for c in configs]
    return {
        s: values[0]
        for s in TITLED_RUN_SETTINGS
        if len(values := [r[s] for r in recorded]) and len(set(values)) == 1 and values[0] not in (None, default(s))
    }


def _shape_overrides(values: dict) -> list[str]:
    return sorted(s for s in values if s.startswith("shape.") and s != "shape.tokens" and values[s] is not None)


def variant(config, mode: str, shown_elsewhere: tuple[str, ...] = ()) -> str:
    """A cell's settings that differ from its mode's preset and the harness defaults, as text
    ('' for a default cell): what tells near-duplicate cells apart across runs. Settings in
    `shown_elsewhere` (a plot's marker says the dtype) are left out."""
    values = {k: (None if k in shown_elsewhere else v) for k, v in _settings(config).items()}
    named = differing(values, mode) + _shape_overrides(values)
    return ", ".join(describe_setting(s, values[s]) for s in named)


def mode_label(family: str, mode: str, config, shown_elsewhere: tuple[str, ...] = ()) -> str:
    """A mode as tables head it (the docs' synthetic names), with whatever tells its cell apart."""
    name = SYNTHETIC_COLUMNS.get(mode, mode) if family == "synthetic" else mode
    differs = variant(config, mode, shown_elsewhere)
    return f"{name} ({differs})" if differs else name


# NOTE [ A heading means one thing ]: a column heading names what ran, whatever data sits beside
# it. A bare mode name is that mode at its preset and the harness defaults (eager, the default
# attention kernel, LoRA rank 16); a cell that differs says how (`No checkpoint (compile regional)`),
# the same words its plot point and progress line use. What every cell of a table shares (training
# and LoRA rank, a compile mode, a single token count or shape override) is said once, in the
# table's title; a setting the rows already name (precision) is not repeated.
# Run settings a title names where every cell shares a value other than the default (training and
# LoRA rank are said together; the rows say the precision).
TITLED_RUN_SETTINGS = tuple(s for s in LABELS["run"] if s not in ("dtype", "lora_rank"))


def _qualifiers(cells: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """Per cell, what its heading adds to the mode's name (NOTE [ A heading means one thing ]), and
    the settings every cell of the table shares, as the title says them."""
    settings = pd.DataFrame([_settings(c) for c in cells["config"]], index=cells.index, dtype=object)
    settings = settings.where(settings.notna(), None)
    shared = {s: settings[s].iloc[0] for s in settings.columns if settings[s].fillna("-").nunique() == 1}

    def heading(mode: str, values: dict) -> str:
        own = [s for s in differing(values, mode) if s in CHECKPOINT_SETTINGS or (s not in shared and s != "dtype")]
        if "training" not in shared and values["training"] not in (None, default("training")):
            own.append("training")
        own += [s for s in _shape_overrides(values) if s not in shared]
        return f" ({', '.join(describe_setting(s, values[s]) for s in own)})" if own else ""

    named = [heading(mode, values) for mode, values in zip(cells["mode"], settings.to_dict("records"))]
    return pd.Series(named, index=cells.index, dtype=object), _table_wide(shared)


def _table_wide(shared: dict) -> list[str]:
    """What every cell of a table shares and its title says: training (with the LoRA rank), run
    settings other than their defaults, shape overrides and a single token count."""
    words = []
    if shared.get("training") is not None:
        rank = shared.get("lora_rank")
        words.append(shared["training"] + (f", LoRA rank {rank}" if shared["training"] == "lora" and rank else ""))
    words += [describe_setting(s, shared[s]) for s in TITLED_RUN_SETTINGS if shared.get(s) not in (None, default(s))]
    words += [
        describe_setting(s, shared[s]) for s in sorted(shared) if s.startswith("shape.") and shared[s] is not None
    ]
    return words


def offloaded_nothing(report) -> str | None:
    """Why a cell that asked for attention offload moved nothing (its report's counters), or None."""
    if not isinstance(report, dict) or report.get("attention_regions_offloaded", 0):
        return None
    skipped = report.get("attention_offload_skipped", 0)
    if not skipped:
        return None
    return (
        f"offloads nothing: all {skipped} attention modules sit in recomputed blocks, whose saved tensors "
        "recompute owns; the same work as Torch layer (attention offload inside regions, as the docs' "
        "activation-offload now runs, and seg2-stride4-offload-plain and torch-ffn-offload offload)"
    )


def _footnoted(cells: pd.DataFrame, texts: list[str]) -> tuple[pd.Series, list[str]]:
    """Cell texts with `[n]` after a status whose reason is known (or an offload that moved
    nothing, from the cell's report), and the numbered reasons."""
    notes: list[str] = []
    marked = []
    reports = cells["report"] if "report" in cells else [None] * len(cells)
    for text, status, reason, report in zip(texts, cells["status"], cells["reason"], reports):
        note = reason if status in FOOTNOTED and isinstance(reason, str) and reason else offloaded_nothing(report)
        if note:
            if note not in notes:
                notes.append(note)
            text = f"{text} [{notes.index(note) + 1}]"
        marked.append(text)
    return pd.Series(marked, index=cells.index), notes


def table_unit(cells: pd.DataFrame) -> str:
    """GiB, the docs' unit, for published and GPU tables and wherever a peak reaches a GiB; MiB for
    tables of small (CPU, tiny) peaks, which would otherwise all read 0.00 GiB."""
    docs = (cells["provenance"] == Provenance.PUBLISHED).any() or (
        (cells["provenance"] == Provenance.MEASURED) & (cells["kind"] == "cuda")
    ).any()
    largest = pd.concat([cells["peak_bytes"], cells["predicted_bytes"]]).max()
    return "GiB" if docs or pd.isna(largest) else unit_for(largest)[0]


def legend(cells: pd.DataFrame, unit: str, texts: list[str]) -> str:
    provenance, kinds = set(cells["provenance"]), set(cells["kind"])
    if provenance == {Provenance.PUBLISHED}:
        what = f"sec/step / peak {unit} as the docs published them"
    elif provenance == {Provenance.PREDICTED}:
        what = f"the predicted peak in {unit} (a prediction: nothing ran, so no time)"
    elif kinds == {"cpu"}:
        what = f"median sec/step of the measured steps / peak {unit} of live tensors on the CPU (not GPU memory)"
    else:
        what = f"median sec/step of the measured steps / peak {unit} allocated on the GPU"
    marks = [
        (NOISY_MARK, "`~` the steps' IQR is over 10% of the median"),
        (BUSY_MARK, f"`!` the host was busy (load above {BUSY_LOAD:g} per core): its time is not comparable"),
        ("] ", "`[n]` the reason, under the table"),
        (NOT_RUN, "`not run`: not in this sweep"),
    ]
    shown = [words for mark, words in marks if any(mark in t or (mark == "] " and t.endswith("]")) for t in texts)]
    figures = pd.concat([cells["peak_bytes"], cells["predicted_bytes"]]).notna().any()
    head = f"Each cell: {what}, or a status." if figures else "Each cell: a status (no cell ran to a figure)."
    return head + (" " + "; ".join(shown) + "." if shown else "")


def shape_groups(cells: pd.DataFrame):
    """The cells of each family, run, hardware, shape and precision, as the studies' tables group
    them: (family, where: 'tiny, 32 tokens, fp32 on CPU: ... (run)', an id prefix, the group)."""
    cells = cells.assign(precision=precision(cells) if len(cells) else [])
    keys = ["family", "run_name", "hardware", "preset", "tokens", "precision"]
    for (family, run, hardware, preset, tokens, label), group in cells.groupby(
        keys, sort=True, dropna=False, observed=True
    ):
        shape = preset + ("" if pd.isna(tokens) else f", {int(tokens)} tokens")
        yield family, f"{shape}, {label} on {hardware} ({run})", f"{family}/{run}/{hardware}/{shape}/{label}", group


def precision(cells: pd.DataFrame) -> pd.Categorical:
    """Each cell's precision as a row names it (bf16, fp32, int8 (TorchAO)), in the docs' order."""

    def dtype(config, kind) -> str:
        declared = recorded_setting(config, "dtype")
        return declared if declared != "auto" else "fp32" if kind == "cpu" else "bf16"

    labels = [precision_label(q, dtype(c, k)) for q, c, k in zip(cells["quantization"], cells["config"], cells["kind"])]
    order = {q: i for i, q in enumerate(_quantization_order(cells))}
    ranked = sorted(set(zip(labels, cells["quantization"])), key=lambda lq: (order[lq[1]], lq[0]))
    return pd.Categorical(labels, categories=list(dict.fromkeys(label for label, _ in ranked)), ordered=True)


def _quantization_order(cells: pd.DataFrame) -> list[str]:
    present = set(cells["quantization"])
    return [q for q in QUANTIZATION_ORDER if q in present] + sorted(present - set(QUANTIZATION_ORDER))


@dataclass
class Pivot:
    frame: pd.DataFrame
    footnotes: list[str]
    legend: str
    shared: list[str]  # what every cell shares, for the title (NOTE [ A heading means one thing ])


def _pivot(cells: pd.DataFrame, rows: list[str], label: dict[str, str], order: list[str], every_column: bool) -> Pivot:
    """Rows by `rows`, one column per mode heading (the docs' order, each mode's variants after it),
    the footnotes, the legend line and what the title says every cell shares."""
    unit = table_unit(cells)
    texts, notes = _footnoted(cells, cell_texts(cells, unit))
    qualifiers, shared = _qualifiers(cells)
    cells = cells.assign(column=cells["mode"].map(lambda m: label.get(m, m)) + qualifiers, text=texts)
    matrix = cells.pivot_table(index=rows, columns="column", values="text", aggfunc="last", observed=True)
    base = [label.get(m, m) for m in order]

    def rank(column: str) -> tuple:
        at = next((i for i, b in enumerate(base) if column == b or column.startswith(b + " (")), len(base))
        return at, at == len(base) or column != base[at], column

    columns = set(matrix.columns) | (set(base) if every_column else set())
    matrix = matrix.reindex(columns=sorted(columns, key=rank)).astype(object).fillna(NOT_RUN)
    matrix.columns.name = None
    frame = matrix.reset_index().rename(columns=HEADINGS)
    line = legend(cells, unit, [str(t) for row in frame.itertuples(index=False) for t in row])
    return Pivot(frame, notes, line, shared)


HEADINGS = {"hardware": "Hardware", "tokens": "Tokens", "precision": "Precision"}


def synthetic_matrix(cells: pd.DataFrame) -> Pivot:
    """Rows hardware (x tokens x precision when the sweep has several), columns the docs' mode names;
    a single token count or precision goes to the title."""
    cells = cells.assign(precision=precision(cells))
    varies = {axis: cells[axis].nunique(dropna=True) > 1 for axis in ("tokens", "precision")}
    table = _pivot(
        cells, ["hardware", *(a for a in varies if varies[a])], SYNTHETIC_COLUMNS, list(SYNTHETIC_COLUMNS), True
    )
    single = [f"{int(cells['tokens'].dropna().iloc[0])} tokens"] if cells["tokens"].nunique() == 1 else []
    single += [str(cells["precision"].iloc[0])] if not varies["precision"] else []
    table.shared = single + [w for w in table.shared if not w.startswith("tokens ")]
    return table


def family_matrix(cells: pd.DataFrame) -> Pivot:
    """Rows precision (docs order), columns modes (docs order)."""
    return _pivot(cells.assign(precision=precision(cells)), ["precision"], {}, list(MODES), every_column=False)


def titled(title: str, table: Pivot) -> str:
    return f"{title}; {', '.join(table.shared)}" if table.shared else title


def resolution(height, width, frames) -> str:
    if pd.isna(height) or pd.isna(width):
        return ""
    text = f"{int(height)}x{int(width)}"
    return text + (f", {int(frames)} frames" if not pd.isna(frames) else "")


def _matrix(table_id: str, family: str, sweep: str, title: str, table: Pivot, cells: pd.DataFrame) -> Matrix:
    return Matrix(
        table_id, family, sweep, titled(title, table), table.frame, _sources(cells), table.footnotes, table.legend,
        table.shared,
    )  # fmt: skip


def build_matrices(cells: pd.DataFrame) -> list[Matrix]:
    matrices = []
    for (family, sweep), group in cells.groupby(["family", "run_name"], sort=True):
        if family == "synthetic":
            matrices.append(
                _matrix(f"{family}/{sweep}", family, sweep, f"{family}: {sweep}", synthetic_matrix(group), group)
            )
            continue
        group = group.assign(
            resolution=[resolution(h, w, f) for h, w, f in zip(group["height"], group["width"], group["frames"])]
        )
        for (hardware, preset), part in group.groupby(["hardware", "preset"], sort=True):
            shapes = part.groupby("resolution", sort=True)
            for shape, piece in shapes:
                table_id = f"{family}/{sweep}/{slug(hardware)}/{preset}" + (
                    f"/{slug(shape)}" if len(shapes) > 1 else ""
                )
                title = f"{family}: {sweep}, {preset}{f' ({shape})' if shape else ''} on {hardware}"
                matrices.append(_matrix(table_id, family, sweep, title, family_matrix(piece), piece))
    return matrices
