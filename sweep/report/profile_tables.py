"""Profiled cells (`measure.profile=true`) as a table per family, run and hardware: where a step's
time goes, in the docs' terms (kernels active 93.1% of the captured interval, 70.5% of kernel
time in GEMM, 9.7% in attention), with the trace file of each."""

from __future__ import annotations

import pandas as pd

from .matrices import mode_label
from .text import StudyTable

LEGEND = (
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
        tables.append(StudyTable(f"{family}/{run}/{hardware}/profile", family, title, pd.DataFrame(rows), LEGEND))
    return tables
