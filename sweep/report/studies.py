"""The docs' other studies as report tables, one kind per section: compile against eager, the
attention backends with their numerics, samples/s by batch, and profile summaries. Each is a
StudyTable per family, run and shape, shown on the family's page."""

from __future__ import annotations

import pandas as pd

from ckptlib.compile import COMPILE_MODES
from ckptlib.modes import mode_rank
from sweep.vocabulary import Status

from .matrices import mode_label, recorded_setting, shape_groups, table_unit
from .text import SYNTHETIC_COLUMNS, StudyTable, cell_texts

# ---- Compilation (the docs' regional-compilation rows): for each family, run, hardware, preset and
# precision measured under two or more compile modes, one row per checkpointing mode and a column pair
# per compile mode: steady sec/step with the peak, and the first step's extra time with the steps it
# took to settle.

COMPILE_LEGEND = (
    "sec/step / peak: the measured steps, after warmup. First step: the first step's time over sec/step "
    "(Inductor compiles cold in each cell, so this is the whole compile), and after how many steps the "
    "times settled (within 25% of sec/step). On a CPU a compiled cell's peak is that of one eager step "
    "of its schedule (the live-tensor tracker does not see compiled code's buffers); on CUDA it is the "
    "allocator's, over the compiled steps."
)


def compile_tables(cells: pd.DataFrame) -> list[StudyTable]:
    cells = cells.assign(compiled=[recorded_setting(c, "compile") for c in cells["config"]])
    return [
        StudyTable(f"{prefix}/compile", family, f"{family}: compilation, {where}", _compile_rows(group), COMPILE_LEGEND)
        for family, where, prefix, group in shape_groups(cells)
        if group["compiled"].nunique() > 1
    ]


def _compile_rows(group: pd.DataFrame) -> pd.DataFrame:
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


# ---- Attention backends (the docs' Qwen Image 2.1 study): for each family, run, hardware, preset and
# precision measured under two or more SDPA backends or with numerics, one row per mode and backend
# asked for: the kernel that ran, sec/step, peak, and the loss and gradient error against the fp32
# math-backend reference (`measure.numerics=true`).

ATTENTION_LEGEND = (
    "Ran: the SDPA kernel(s) torch used (checked on a forward, not assumed). Errors: relative to one step "
    "of the same weights and inputs in fp32 with the math backend and no checkpointing (blank without "
    "`measure.numerics=true`)."
)


def attention_tables(cells: pd.DataFrame) -> list[StudyTable]:
    cells = cells.assign(asked=[recorded_setting(c, "attention") for c in cells["config"]])
    return [
        StudyTable(
            f"{prefix}/attention",
            family,
            f"{family}: attention backends, {where}",
            _attention_rows(group),
            ATTENTION_LEGEND,
        )
        for family, where, prefix, group in shape_groups(cells)
        if group["asked"].nunique() > 1 or group["grad_rel_error"].notna().any()
    ]


def _attention_rows(group: pd.DataFrame) -> pd.DataFrame:
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


# ---- Batch scaling: samples per second (images, video frames, audio clips, sequences) of measured
# steps (the docs' H200: batch 10 in 0.612 s, batch 20 in 1.223 s, both about 16.35 images/s). One
# row per mode and one column per batch; a cell reads `0.612s · 16.3 images/s`.


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
        frame = _batch_pivot(group)
        shape = f"{preset}" + ("" if pd.isna(tokens) else f", {int(tokens)} tokens")
        precision = "" if quantization == "none" else f", {quantization}"
        table_id = f"{family}/{run}/{hardware}/{shape}{precision}/batch"
        title = f"{family}: throughput by batch, {shape}{precision} on {hardware} ({run})"
        points = group[["row", "batch", "samples_per_s"]].assign(unit=unit)
        legend = f"Each cell: median sec/step · {unit}/s (samples per step / sec/step)."
        tables.append(StudyTable(table_id, family, title, frame, legend, points))
    return tables


def _batch_pivot(group: pd.DataFrame) -> pd.DataFrame:
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


# ---- Profiles (`measure.profile=true`), a table per family, run and hardware: where a step's time
# goes, in the docs' terms (kernels active 93.1% of the captured interval, 70.5% of kernel time in
# GEMM, 9.7% in attention), with the trace file of each.

PROFILE_LEGEND = (
    "Active: kernel (CUDA) or operator (CPU) time over the profiled steps' wall time; GEMM and attention: "
    "shares of that time; exposed copies: copy time with no kernel beside it (a CPU copies in line). "
    "Profiled steps come after the timed ones and are not among them."
)


def profile_tables(cells: pd.DataFrame) -> list[StudyTable]:
    profiled = cells[cells["profile"].map(lambda p: isinstance(p, dict))]
    tables = []
    for (family, run, hardware), group in profiled.groupby(["family", "run_name", "hardware"], sort=True):
        rows = []
        for cell in group.itertuples():
            summary, name = cell.profile, mode_label(family, cell.mode, cell.config)
            top = summary["top_ops"][0] if summary["top_ops"] else ("", 0.0)
            rows.append(
                {
                    "Preset": cell.preset,
                    "Mode": name,
                    "Active": f"{summary['kernel_active_share']:.1%}",
                    "GEMM": f"{summary['gemm_share']:.1%}",
                    "Attention": f"{summary['attention_share']:.1%}",
                    "Exposed copies": f"{summary['exposed_copy_s'] / summary['steps']:.4f} s/step",
                    "Top op": f"{top[0]} ({top[1] / summary['kernel_s']:.0%})" if summary["kernel_s"] else top[0],
                    "Trace (beside the database)": f"traces/{summary['trace']}" if summary.get("trace") else "",
                }
            )
        title = f"{family}: profiles on {hardware} ({run})"
        tables.append(
            StudyTable(f"{family}/{run}/{hardware}/profile", family, title, pd.DataFrame(rows), PROFILE_LEGEND)
        )
    return tables
