"""The compile study as tables (the docs' regional-compilation rows): for each family, run,
hardware, preset and precision measured under two or more compile modes, one row per
checkpointing mode and a column pair per compile mode: steady sec/step with the peak, and the
first step's extra time with the steps it took to settle."""

from __future__ import annotations

import pandas as pd

from ckptlib.compile import COMPILE_MODES
from ckptlib.modes import mode_rank
from sweep.vocabulary import Status

from .matrices import recorded_setting, shape_groups, table_unit
from .text import SYNTHETIC_COLUMNS, StudyTable, cell_texts

LEGEND = (
    "sec/step / peak: the measured steps, after warmup. First step: the first step's time over sec/step "
    "(Inductor compiles cold in each cell, so this is the whole compile), and after how many steps the "
    "times settled (within 25% of sec/step). On a CPU a compiled cell's peak is that of one eager step "
    "of its schedule (the live-tensor tracker does not see compiled code's buffers); on CUDA it is the "
    "allocator's, over the compiled steps."
)


def compile_tables(cells: pd.DataFrame) -> list[StudyTable]:
    cells = cells.assign(compiled=[recorded_setting(c, "compile") for c in cells["config"]])
    return [
        StudyTable(f"{prefix}/compile", family, f"{family}: compilation, {where}", _rows(group), LEGEND)
        for family, where, prefix, group in shape_groups(cells)
        if group["compiled"].nunique() > 1
    ]


def _rows(group: pd.DataFrame) -> pd.DataFrame:
    labels = SYNTHETIC_COLUMNS if (group["family"] == "synthetic").all() else {}
    group = group.assign(text=cell_texts(group, table_unit(group)))
    modes = sorted(group["mode"].unique(), key=mode_rank)
    compiled = [c for c in COMPILE_MODES if c in set(group["compiled"])]
    rows = []
    for mode in modes:
        row = {"Mode": labels.get(mode, mode)}
        for name in compiled:
            cell = group[(group["mode"] == mode) & (group["compiled"] == name)]
            heading = "eager" if name == "none" else name
            row[f"{heading}: sec/step / peak"] = cell["text"].iloc[0] if len(cell) else "not run"
            row[f"{heading}: first step"] = _compile_text(cell.iloc[0]) if len(cell) else ""
        rows.append(row)
    return pd.DataFrame(rows)


def _compile_text(cell) -> str:
    """'+21.3 s, settled at step 1': the first step's time over steady sec/step."""
    if cell["status"] != Status.OK or pd.isna(cell["first_step_s"]) or pd.isna(cell["sec_per_step"]):
        return ""
    settled = "" if pd.isna(cell["settle_steps"]) else f", settled at step {int(cell['settle_steps'])}"
    extra = round(cell["first_step_s"] - cell["sec_per_step"], 1) or 0.0  # no '-0.0'
    return f"{extra:+.1f} s{settled}"
