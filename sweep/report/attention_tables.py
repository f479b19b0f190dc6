"""The attention-backend study as tables (the docs' Qwen Image 2.1 study): for each family, run,
hardware, preset and precision measured under two or more SDPA backends or with numerics, one row
per mode and backend asked for: the kernel that ran, sec/step, peak, and the loss and gradient
error against the fp32 math-backend reference (`measure.numerics=true`)."""

from __future__ import annotations

import pandas as pd

from ckptlib.modes import mode_rank
from sweep.vocabulary import Status

from .matrices import recorded_setting, shape_groups, table_unit
from .text import SYNTHETIC_COLUMNS, StudyTable, cell_texts

LEGEND = (
    "Ran: the SDPA kernel(s) torch used (checked on a forward, not assumed). Errors: relative to one step "
    "of the same weights and inputs in fp32 with the math backend and no checkpointing (blank without "
    "`measure.numerics=true`)."
)


def attention_tables(cells: pd.DataFrame) -> list[StudyTable]:
    cells = cells.assign(asked=[recorded_setting(c, "attention") for c in cells["config"]])
    return [
        StudyTable(f"{prefix}/attention", family, f"{family}: attention backends, {where}", _rows(group), LEGEND)
        for family, where, prefix, group in shape_groups(cells)
        if group["asked"].nunique() > 1 or group["grad_rel_error"].notna().any()
    ]


def _rows(group: pd.DataFrame) -> pd.DataFrame:
    labels = SYNTHETIC_COLUMNS if (group["family"] == "synthetic").all() else {}
    group = group.assign(
        text=cell_texts(group, table_unit(group)),
        _rank=[mode_rank(m) for m in group["mode"]],
    ).sort_values(["_rank", "asked"])
    return pd.DataFrame(
        {
            "Mode": [labels.get(m, m) for m in group["mode"]],
            "Attention": group["asked"],
            "Ran": group["attention_backend"].fillna(""),
            "sec/step / peak": group["text"],
            "loss error": [_error(v) for v in group["loss_rel_error"]],
            "gradient error": [_error(v) for v in group["grad_rel_error"]],
            "why not": [
                reason if status != Status.OK else "" for status, reason in zip(group["status"], group["reason"])
            ],
        }
    )


def _error(value) -> str:
    return "" if pd.isna(value) else f"{value:.3g}"
