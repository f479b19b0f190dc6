"""The docs' table vocabulary: cell text, column names, markdown pipe tables and splice markers."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from ckptlib.modes import MODES, SYNTHETIC_MODES
from ckptlib.quantize import NAMES as QUANTIZATION_NAMES
from ckptlib.units import GIB, MIB
from sweep.vocabulary import FROM_TEXT, TEXT, Provenance, Status

NOISE_THRESHOLD = 0.10  # IQR / median above this marks a cell as noisy
NOISY_MARK = " ~"
BUSY_LOAD = 1.5  # a CPU cell measured while the host's load per core was above this: its time is not clean
BUSY_MARK = " !"
UNITS = {"GiB": GIB, "MiB": MIB}
NOT_RUN = "not run"
# The docs' column names for the synthetic sweep (ckptlib.modes.SYNTHETIC_MODES, in that order);
# family matrices use mode names.
SYNTHETIC_COLUMNS = dict(
    zip(SYNTHETIC_MODES, ("No checkpoint", "Torch FFN", "Unsloth FFN", "Torch layer", "Unsloth layer"), strict=True)
)
MODE_BY_COLUMN = {**{label: mode for mode, label in SYNTHETIC_COLUMNS.items()}, **{m: m for m in MODES}}
QUANTIZATION_ORDER = list(QUANTIZATION_NAMES)  # the docs' row order
_MEASURED = re.compile(r"^(?P<sec>\d+(?:\.\d+)?)s / (?P<size>\d+(?:\.\d+)?) (?P<unit>GiB|MiB)(?P<marks>( [~!])*)$")


def slug(text: str) -> str:
    """A name for files and table ids: lower case, every run of other characters one dash, dots kept."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")


def cell_name(row) -> str:
    """A cell in one line: 'synthetic docs-packed-4096 4096 tokens layer', with the mode's variant and
    the base's quantization where it has one (a row of a diff's frame)."""
    tokens = "" if pd.isna(row.tokens) else f" {int(row.tokens)} tokens"
    mode = row.mode + (f" ({row.variant})" if row.variant else "")
    quantization = "" if row.quantization == "none" else f" {row.quantization}"
    return f"{row.family} {row.preset}{tokens} {mode}{quantization}"


def cell_text(
    status: str,
    sec_per_step: float | None,
    peak_bytes: int | None,
    iqr_s: float | None = None,
    predicted_bytes: int | None = None,
    unit: str = "GiB",
    busy: bool = False,
) -> str:
    """`0.0166s / 4.43 GiB`, or the status word; ` ~` marks IQR/median over 10%, ` !` a busy host. A
    prediction has no time: `predicted 4.43 GiB`; a status cell with a prediction for it:
    `OOM (predicted 95.31 GiB)`. `unit` is GiB (the docs') or MiB (tables of small peaks)."""
    size = UNITS[unit]
    if status != Status.OK:
        word = TEXT.get(status, status)
        if predicted_bytes is None or math.isnan(predicted_bytes):
            return word
        return f"{word.removesuffix(' (predicted)')} (predicted {predicted_bytes / size:.2f} {unit})"
    if sec_per_step is None or math.isnan(sec_per_step):
        return f"predicted {peak_bytes / size:.2f} {unit}"
    noisy = iqr_s is not None and not math.isnan(iqr_s) and sec_per_step and iqr_s / sec_per_step > NOISE_THRESHOLD
    marks = (NOISY_MARK if noisy else "") + (BUSY_MARK if busy else "")
    return f"{sec_per_step:.4f}s / {peak_bytes / size:.2f} {unit}" + marks


def _value(v):
    return None if pd.isna(v) else v


def cell_texts(cells: pd.DataFrame, unit: str = "GiB") -> list[str]:
    """Each cell's table text in `unit` (a frame of sweep.store.query.load_cells); a CPU cell measured
    on a busy host is marked."""
    return [
        cell_text(
            r.status,
            *(_value(v) for v in (r.sec_per_step, r.peak_bytes, r.iqr_s, r.predicted_bytes)),
            unit=unit,
            busy=r.kind == "cpu"
            and r.provenance == Provenance.MEASURED
            and _value(r.host_load) is not None
            and r.host_load > BUSY_LOAD,
        )
        for r in cells.itertuples()
    ]


def parse_cell(text: str) -> dict | None:
    """The inverse of cell_text: a result dict, None for `not run`; ValueError when unparseable."""
    text = text.strip()
    if text == NOT_RUN:
        return None
    if text in FROM_TEXT:
        return {"status": FROM_TEXT[text]}
    match = _MEASURED.match(text)
    if not match:
        raise ValueError(
            f"cannot parse cell {text!r}: expected '0.0166s / 4.43 GiB' or one of {', '.join([*FROM_TEXT, NOT_RUN])}"
        )
    return {
        "status": Status.OK,
        "sec_per_step": float(match["sec"]),
        "peak_bytes": round(float(match["size"]) * UNITS[match["unit"]]),
    }


@dataclass
class MarkdownTable:
    heading: str | None  # the nearest heading above the table
    header: list[str]
    rows: list[tuple[int, list[str]]]  # (line number, cells)
    line: int


class TableError(ValueError):
    pass


def _split(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_tables(text: str, source: str) -> list[MarkdownTable]:
    """Every pipe table of a markdown document; ragged rows are a TableError naming file and line."""
    tables, heading, lines = [], None, text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        is_table = line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|?\s*:?-{3,}", lines[i + 1].strip())
        if not is_table:
            i += 1
            continue
        header = _split(line)
        table = MarkdownTable(heading, header, [], i + 1)
        i += 2
        while i < len(lines) and lines[i].strip().startswith("|"):
            cells = _split(lines[i])
            if len(cells) != len(header):
                raise TableError(f"{source}:{i + 1}: row has {len(cells)} cells, the header has {len(header)}")
            table.rows.append((i + 1, cells))
            i += 1
        tables.append(table)
    return tables


def marker(table_id: str) -> tuple[str, str]:
    return f"<!-- sweep-matrix:start:{table_id} -->", f"<!-- sweep-matrix:end:{table_id} -->"


def wrap(table_id: str, body: str) -> str:
    start, end = marker(table_id)
    return f"{start}\n{body.strip()}\n{end}"


def splice(document: str, tables: dict[str, str]) -> tuple[str, list[str]]:
    """Replace each marked block whose id is in `tables`; returns the text and the ids replaced."""
    replaced = []

    def substitute(match: re.Match) -> str:
        table_id = match["id"]
        if table_id not in tables:
            return match[0]
        replaced.append(table_id)
        return wrap(table_id, tables[table_id])

    pattern = re.compile(r"<!-- sweep-matrix:start:(?P<id>[^ ]+) -->.*?<!-- sweep-matrix:end:(?P=id) -->", re.S)
    return pattern.sub(substitute, document), replaced


@dataclass
class StudyTable:
    """One of the docs' other studies (batch, attention, profiles) as a table on a family's page."""

    table_id: str
    family: str
    title: str
    frame: object  # a pandas DataFrame
    legend: str  # what its cells mean, printed under it
    points: object = None  # what its plot draws, where it has one (a DataFrame)

    def markdown(self) -> str:
        table = self.frame.to_markdown(index=False, tablefmt="github", disable_numparse=True)
        return f"{table}\n\n{self.legend}"
