"""Throughput: samples per second (images, video frames, audio clips, sequences) of measured steps,
and the batch tables of the docs' batch-scaling study (H200: batch 10 in 0.612 s, batch 20 in
1.223 s, both about 16.35 images/s).

A batch table has one row per mode and one column per batch; a cell reads `0.612s · 16.3 images/s`.
"""

from __future__ import annotations

import pandas as pd

from ckptlib.modes import mode_rank
from sweep.vocabulary import Status

from .matrices import mode_label
from .text import StudyTable


def batch_tables(cells: pd.DataFrame) -> list[StudyTable]:
    """A table for every family, run, hardware, preset and precision measured at two or more batches."""
    measured = cells[(cells["status"] == Status.OK) & cells["samples_per_s"].notna() & cells["batch"].notna()]
    tables = []
    keys = ["family", "run_name", "hardware", "preset", "tokens", "quantization", "sample_unit"]
    for (family, run, hardware, preset, tokens, quantization, unit), group in measured.groupby(
        keys, sort=True, dropna=False
    ):
        if group["batch"].nunique() < 2:
            continue
        # the mode and whatever else tells its cells apart, the batch aside (the columns say it)
        group = group.assign(
            row=[
                mode_label(family, m, c, shown_elsewhere=("shape.batch",))
                for m, c in zip(group["mode"], group["config"])
            ],
            rank=[mode_rank(mode) for mode in group["mode"]],
        ).sort_values(["rank", "row", "batch"])
        frame = _pivot(group)
        shape = f"{preset}" + ("" if pd.isna(tokens) else f", {int(tokens)} tokens")
        precision = "" if quantization == "none" else f", {quantization}"
        table_id = f"{family}/{run}/{hardware}/{shape}{precision}/batch"
        title = f"{family}: throughput by batch, {shape}{precision} on {hardware} ({run})"
        points = group[["row", "batch", "samples_per_s"]].assign(unit=unit)
        legend = f"Each cell: median sec/step · {unit}/s (samples per step / sec/step)."
        tables.append(StudyTable(table_id, family, title, frame, legend, points))
    return tables


def _pivot(group: pd.DataFrame) -> pd.DataFrame:
    text = [
        f"{s:.4f}s · {t:.3g} {u}/s"
        for s, t, u in zip(group["sec_per_step"], group["samples_per_s"], group["sample_unit"])
    ]
    group = group.assign(text=text, batch_label=[f"batch {int(b)}" for b in group["batch"]])
    if group.duplicated(["row", "batch_label"]).any():  # never one figure standing for two cells
        raise AssertionError("two cells share a batch table row and column")
    matrix = group.pivot_table(index="row", columns="batch_label", values="text", aggfunc="first")
    batches = sorted(matrix.columns, key=lambda label: int(label.split()[1]))
    matrix = matrix.reindex(index=list(dict.fromkeys(group["row"])), columns=batches).fillna("")
    matrix.columns.name = None
    return matrix.reset_index().rename(columns={"row": "Mode"})
