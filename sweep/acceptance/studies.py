"""The studies check: the docs' other studies measured through `ckpt-sweep run` on the device:
regional compilation against eager, the attention-backend table with its numerics, and batch
scaling (samples/s at batch 1 to 8). Tiny, the same with fewer settings."""

from __future__ import annotations

from pathlib import Path

from ckptlib.units import GIB
from sweep.vocabulary import Status

from .common import RUN, CheckResult, Target, cells, exited, one_line, sweep_cli, verdict

# (study, overrides at the docs' scale, tiny, cells it measures at the docs' scale, tiny)
STUDIES = {
    "compile": (
        ["preset=docs-packed-4096", "mode=none,layer", "compile=none,regional", "measure.steps=10"],
        ["preset=tiny", "mode=layer", "compile=none,regional"],
        4,
        2,
    ),
    "attention": (
        ["preset=docs-packed-4096", "mode=none", "attention=auto,math,flash,efficient,cudnn", "measure.numerics=true"],
        ["preset=tiny", "mode=none", "attention=auto,math", "measure.numerics=true"],
        5,
        2,
    ),
    "batch": (
        ["preset=docs-packed-1024", "mode=none", "+shape.batch=1,2,4,8"],
        ["preset=tiny", "mode=none", "+shape.batch=1,2"],
        4,
        2,
    ),
}


def studies(target: Target, out: Path) -> CheckResult:
    problems, table = [], ["| study | setting | status | sec/step | peak GiB | figure |", "|---|---|---|---|---|---|"]
    figures = {}
    for study, (docs, tiny, docs_cells, tiny_cells) in STUDIES.items():
        run = f"{RUN}-{study}"
        returncode = sweep_cli(
            out, "sweep=none", *(tiny if target.tiny else docs), f"device={target.device}",
            "measure.warmup_steps=2", f"run.name={run}",
        )  # fmt: skip
        problems += [f"{study}: {line}" for line in exited(returncode)]
        rows = cells(out, run)
        if len(rows) != (tiny_cells if target.tiny else docs_cells):
            problems.append(f"{study}: {len(rows)} cells measured")
        for cell in rows:
            setting, figure = _describe(study, cell)
            figures[f"{study}/{setting}"] = figure
            peak = "" if cell["peak_bytes"] is None else f"{cell['peak_bytes'] / GIB:.2f}"
            seconds = "" if cell["sec_per_step"] is None else f"{cell['sec_per_step']:.4f}"
            table.append(f"| {study} | {setting} | {cell['status']} | {seconds} | {peak} | {figure} |")
            if cell["status"] not in (Status.OK, Status.UNSUPPORTED):  # a backend the device lacks is unsupported
                problems.append(f"{study} {setting}: {cell['status']}: {one_line(cell['reason'])}")
    details = [f"{len(table) - 2} cells through ckpt-sweep run (runs {RUN}-compile, -attention, -batch)"]
    return verdict("studies", problems, details, table=table, figures=figures)


def _describe(study: str, cell: dict) -> tuple[str, str]:
    """The cell's setting in its study, and the figure the study is about."""
    config = cell["config"]
    if study == "compile":
        extra = "" if cell["first_step_s"] is None else f"first step {cell['first_step_s']:.1f} s"
        return f"{cell['mode']}, compile {config.get('compile', 'none')}", extra
    if study == "attention":
        error = "" if cell["grad_rel_error"] is None else f"gradient error {cell['grad_rel_error']:.3g}"
        return f"{config.get('attention', 'auto')} (ran {cell['attention_backend'] or '-'})", error
    rate = "" if cell["samples_per_s"] is None else f"{cell['samples_per_s']:.2f} {cell['sample_unit']}/s"
    return f"batch {cell['batch']}", rate
