"""The docs' matrices from recorded cells: rows hardware (x tokens x precision) or precision, columns
modes in the docs' order, one text per cell.

Nothing is hidden: a setting that tells two cells of one row and column apart (interval, stride,
training, LoRA rank, dtype, a shape override, ...) goes into the column heading, and so does any
checkpointing setting that differs from the mode's preset (`Torch layer (interval 3)`). A cell that
did not run to a figure carries its reason as a numbered footnote under the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from ckptlib.modes import MODES

from .status import Status
from .tables import FAMILY_MODES, NOT_RUN, QUANTIZATION_ORDER, SYNTHETIC_COLUMNS

# Cell settings (keys of the recorded cell config) and how a heading names their value.
CHECKPOINT_SETTINGS = {
    "backend": "{}",
    "interval": "interval {}",
    "stride": "stride {}",
    "offload_attention": "attention offload {}",
}
RUN_SETTINGS = {
    "training": "{}",
    "lora_rank": "LoRA rank {}",
    "dtype": "{}",
    "seed": "seed {}",
    "pin_memory_max_buckets": "{} pinned buckets",
}
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

    def markdown(self) -> str:
        table = self.frame.to_markdown(index=False, tablefmt="github", disable_numparse=True)
        return "\n".join(
            [table, *([""] + [f"[{i}] {note}" for i, note in enumerate(self.footnotes, 1)] if self.footnotes else [])]
        )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _sources(cells: pd.DataFrame) -> list[str]:
    pairs = cells[["hardware", "provenance"]].drop_duplicates().itertuples(index=False)
    return [f"{hardware}: {provenance}" for hardware, provenance in pairs]


def _settings(config) -> dict:
    """The settings of one recorded cell that a heading may need (published cells record few)."""
    config = config if isinstance(config, dict) else {}
    values = {k: config.get(k) for k in (*CHECKPOINT_SETTINGS, *RUN_SETTINGS)}
    values.update({f"shape.{k}": v for k, v in (config.get("shape") or {}).items()})
    return values


def _describe(setting: str, value) -> str:
    if setting.startswith("shape."):
        return f"{setting.removeprefix('shape.')} {value}"
    return {**CHECKPOINT_SETTINGS, **RUN_SETTINGS}[setting].format(value)


CELL_DEFAULTS = {"training": None, "lora_rank": 16, "dtype": "auto", "seed": 0, "pin_memory_max_buckets": 12}


def variant(config, mode: str) -> str:
    """A cell's settings that differ from its mode's preset and the harness defaults, as text
    ('' for a default cell): what tells near-duplicate cells apart across runs."""
    values, preset = _settings(config), MODES.get(mode)
    named = [
        s
        for s in CHECKPOINT_SETTINGS
        if preset is not None and values[s] is not None and values[s] != getattr(preset, s)
    ]
    named += [s for s, default in CELL_DEFAULTS.items() if default is not None and values[s] not in (None, default)]
    named += sorted(s for s in values if s.startswith("shape.") and s != "shape.tokens")
    return ", ".join(_describe(s, values[s]) for s in named)


def _qualifiers(cells: pd.DataFrame, rows: list[str]) -> pd.Series:
    """Per cell, the settings its heading must name: checkpointing settings that differ from its
    mode's preset, and settings that differ between cells sharing a row and mode (each cell then
    names its value where it is not the table's usual one)."""
    settings = pd.DataFrame([_settings(c) for c in cells["config"]], index=cells.index, dtype=object)
    settings = settings.where(settings.notna(), None)
    keyed = pd.concat([cells[rows].astype(object), cells["mode"], settings.fillna("-")], axis=1)
    varying = [s for s in settings.columns if keyed.groupby([*rows, "mode"], dropna=False)[s].nunique().max() > 1]
    usual = {s: settings[s].fillna("-").mode().iloc[0] for s in varying}

    def qualifier(index) -> str:
        values, preset = settings.loc[index], MODES.get(cells.at[index, "mode"])
        named = [
            s
            for s in CHECKPOINT_SETTINGS
            if preset is not None and values[s] is not None and values[s] != getattr(preset, s)
        ]
        named += [s for s in varying if s not in named and values[s] is not None and values[s] != usual[s]]
        return f" ({', '.join(_describe(s, values[s]) for s in named)})" if named else ""

    return pd.Series([qualifier(i) for i in cells.index], index=cells.index)


def _footnoted(cells: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """Cell texts with `[n]` after a status whose reason is known, and the numbered reasons."""
    notes: list[str] = []
    texts = []
    for text, status, reason in zip(cells["text"], cells["status"], cells["reason"]):
        if status in FOOTNOTED and isinstance(reason, str) and reason:
            if reason not in notes:
                notes.append(reason)
            text = f"{text} [{notes.index(reason) + 1}]"
        texts.append(text)
    return pd.Series(texts, index=cells.index), notes


def _quantization_order(cells: pd.DataFrame) -> list[str]:
    present = set(cells["quantization"])
    return [q for q in QUANTIZATION_ORDER if q in present] + sorted(present - set(QUANTIZATION_ORDER))


def _pivot(
    cells: pd.DataFrame, rows: list[str], label: dict[str, str], order: list[str], every_column: bool
) -> tuple[pd.DataFrame, list[str]]:
    """Rows by `rows`, one column per mode heading: the docs' order, each mode's variants after it."""
    texts, notes = _footnoted(cells)
    cells = cells.assign(column=cells["mode"].map(lambda m: label.get(m, m)) + _qualifiers(cells, rows), text=texts)
    matrix = cells.pivot_table(index=rows, columns="column", values="text", aggfunc="last", observed=True)
    base = [label.get(m, m) for m in order]

    def rank(column: str) -> tuple:
        at = next((i for i, b in enumerate(base) if column == b or column.startswith(b + " (")), len(base))
        return at, at == len(base) or column != base[at], column

    columns = set(matrix.columns) | (set(base) if every_column else set())
    matrix = matrix.reindex(columns=sorted(columns, key=rank)).astype(object).fillna(NOT_RUN)
    matrix.columns.name = None
    return matrix.reset_index(), notes


def synthetic_matrix(cells: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows GPU (x Tokens x precision when the sweep has several), columns the docs' mode names."""
    cells = cells.assign(quantization=pd.Categorical(cells["quantization"], _quantization_order(cells), ordered=True))
    rows = ["hardware", *(axis for axis in ("tokens", "quantization") if cells[axis].nunique(dropna=True) > 1)]
    frame, notes = _pivot(cells, rows, SYNTHETIC_COLUMNS, list(SYNTHETIC_COLUMNS), every_column=True)
    return frame.rename(columns={"hardware": "GPU", "tokens": "Tokens", "quantization": "precision"}), notes


def family_matrix(cells: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows precision/quantization (docs order), columns modes (docs order)."""
    cells = cells.assign(quantization=pd.Categorical(cells["quantization"], _quantization_order(cells), ordered=True))
    frame, notes = _pivot(cells, ["quantization"], {}, FAMILY_MODES, every_column=False)
    return frame.rename(columns={"quantization": "precision"}), notes


def resolution(height, width, frames) -> str:
    if pd.isna(height) or pd.isna(width):
        return ""
    text = f"{int(height)}x{int(width)}"
    return text + (f", {int(frames)} frames" if not pd.isna(frames) else "")


def build_matrices(cells: pd.DataFrame) -> list[Matrix]:
    matrices = []
    for (family, sweep), group in cells.groupby(["family", "run_name"], sort=True):
        if family == "synthetic":
            frame, notes = synthetic_matrix(group)
            matrices.append(
                Matrix(f"{family}/{sweep}", family, sweep, f"{family}: {sweep}", frame, _sources(group), notes)
            )
            continue
        group = group.assign(
            resolution=[resolution(h, w, f) for h, w, f in zip(group["height"], group["width"], group["frames"])]
        )
        for (hardware, preset), part in group.groupby(["hardware", "preset"], sort=True):
            shapes = part.groupby("resolution", sort=True)
            for shape, piece in shapes:
                table_id = f"{family}/{sweep}/{_slug(hardware)}/{preset}" + (
                    f"/{_slug(shape)}" if len(shapes) > 1 else ""
                )
                shown = f" ({shape})" if shape else ""
                frame, notes = family_matrix(piece)
                matrices.append(
                    Matrix(
                        table_id,
                        family,
                        sweep,
                        f"{family}: {sweep}, {preset}{shown} on {hardware}",
                        frame,
                        _sources(piece),
                        notes,
                    )
                )
    return matrices
