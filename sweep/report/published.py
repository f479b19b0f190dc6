"""`ckpt-sweep import`: the docs' published pipe tables into the database, as runs of provenance `published`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from ckptlib.quantize import QUANTIZATIONS
from sweep.config.cell import identity_key
from sweep.store import database as store
from sweep.store.results import CellResult
from sweep.vocabulary import Provenance

from .text import MODE_BY_COLUMN, TableError, parse_cell, parse_tables, slug

BUNDLED = Path(__file__).resolve().parent.parent / "published"  # sweep/published: the docs' tables, shipped
# What `import --docs` reads with this module: the docs' own tables. SimpleTuner's family tables,
# shipped beside them (one table per family, modes as rows), are read by reproduce_families.py.
DOCS_TABLES = (BUNDLED / "unsloth-synthetic.md",)


@dataclass(frozen=True)
class TableMeaning:
    """What a docs table holds: which sweep, family and shape its rows are."""

    sweep: str
    family: str
    training: str = "lora"
    preset: str = "{tokens}"  # formatted with the row's tokens
    tokens: int | None = None
    settings: tuple[tuple[str, Any], ...] = ()  # cell settings the table's runs used (not in its key)


# The docs' headings, lower-cased, for tables whose rows do not say everything themselves. The
# larger shape's heading says width 4096 and 3072 tokens; its numbers are 32 of the packed block at
# 4096 tokens (NOTE [ The docs' synthetic block ] in ckptlib/synthetic/__init__.py), which is what it records.
# Both were measured with the early offloader, which reloaded each region just in time.
DOCS_OFFLOADER = (("offload_prefetch", False),)
KNOWN_TABLES = {
    "packed image latents": TableMeaning(
        "packed-latents", "synthetic", "frozen", "docs-packed-{tokens}", settings=DOCS_OFFLOADER
    ),
    "larger transformer shape": TableMeaning(
        "large-shape", "synthetic", "frozen", "docs-large", 4096, settings=DOCS_OFFLOADER
    ),
}
ROW_COLUMNS = {
    "gpu": "hardware",
    "hardware": "hardware",
    "tokens": "tokens",
    "precision": "quantization",
    "quantization": "quantization",
}


def quantization_of(precision: str) -> str:
    """A precision cell (`bf16`, `int8 (TorchAO)`, or a config name) as a quantization name."""
    labels = {q.label: name for name, q in QUANTIZATIONS.items()}
    return "none" if precision in ("none", "bf16", "fp16", "fp32") else labels.get(precision, precision)


def _meaning(table, path: str, family: str | None) -> TableMeaning:
    heading = (table.heading or "").strip()
    known = KNOWN_TABLES.get(heading.lower())
    if known is not None:
        return known
    if family is None:
        raise TableError(
            f"{path}:{table.line}: table under heading {heading!r} is not a known docs table; "
            f"pass --family to say whose matrix it is"
        )
    return TableMeaning(slug(heading) or "imported", family)


def published_run(name: str, hardware: str, source: str) -> dict:
    """An empty run of provenance `published`, as store.replace_runs takes it; cells are appended."""
    return {
        "name": name,
        "hardware": hardware,
        "provenance": Provenance.PUBLISHED,
        "source": source,
        "environment": {"hardware": hardware, "source": source},
        "cells": [],
    }


def parse_file(
    path: str | Path, hardware: str | None = None, source: str | None = None, family: str | None = None
) -> list[dict]:
    """Runs (as store.replace_runs takes them) from a markdown file; TableError names file, line and cell."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise TableError(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise TableError(
            f"cannot read {path}: not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
            f"{error.start}); the docs' tables are markdown"
        ) from None
    if "\x00" in text:
        raise TableError(f"cannot read {path}: a binary file (NUL bytes), not a markdown table")
    tables = parse_tables(text, str(path))
    if not tables:
        raise TableError(f"{path}: no pipe table found")
    runs: dict[tuple[str, str], dict] = {}
    for table in tables:
        meaning = _meaning(table, str(path), family)
        roles = {}
        for index, name in enumerate(table.header):
            role = ROW_COLUMNS.get(name.lower()) or ("mode:" + MODE_BY_COLUMN[name] if name in MODE_BY_COLUMN else None)
            if role is None:
                raise TableError(
                    f"{path}:{table.line}: unknown column {name!r}; known columns: GPU, Tokens, "
                    f"Precision, {', '.join(MODE_BY_COLUMN)}"
                )
            roles[index] = role
        for line, cells in table.rows:
            row = {"hardware": hardware, "tokens": meaning.tokens, "quantization": "none"}
            for index, role in roles.items():
                if not role.startswith("mode:"):
                    row[role] = cells[index]
            if not row["hardware"]:
                raise TableError(f"{path}:{line}: no GPU column and no --hardware given")
            if row["tokens"] is not None:
                try:
                    row["tokens"] = int(row["tokens"])
                except ValueError:
                    raise TableError(f"{path}:{line}: Tokens cell {row['tokens']!r} is not a whole number") from None
            run = runs.setdefault(
                (meaning.sweep, row["hardware"]), published_run(meaning.sweep, row["hardware"], source or str(path))
            )
            for index, role in roles.items():
                if not role.startswith("mode:"):
                    continue
                try:
                    result = parse_cell(cells[index])
                except ValueError as error:
                    raise TableError(f"{path}:{line}: column {table.header[index]!r}: {error}") from None
                if result is None:  # not run
                    continue
                cell = {
                    "family": meaning.family,
                    "preset": meaning.preset.format(tokens=row["tokens"]),
                    "mode": role[5:],
                    "quantization": quantization_of(row["quantization"]),
                    "training": meaning.training,
                }
                key = identity_key({**cell, "tokens": row["tokens"]})
                cell.update(meaning.settings)
                run["cells"].append((cell, key, CellResult(**result), {"tokens": row["tokens"]}))
    return list(runs.values())


def import_file(engine: Engine, path: str | Path, **options) -> list[int]:
    """Parse everything first, then write every run in one transaction: a bad file changes nothing."""
    return store.replace_runs(engine, parse_file(path, **options))
