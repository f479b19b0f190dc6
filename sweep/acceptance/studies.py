"""The studies check: the docs' other studies measured through `ckpt-sweep run` on the device, as
issue 18 asks of a GPU session: regional compilation against eager, the attention-backend table
with its numerics, and batch scaling (samples/s at batch 1 to 8). On a CPU, the same at tiny scale."""

from __future__ import annotations

from pathlib import Path

from ckptlib.units import GIB

from .checks import RUN, Outcome, _cuda, _verdict, cells, sweep_cli

# (study, overrides on a GPU, on a CPU, cells it measures on a GPU, on a CPU)
STUDIES = {
    "compile": (
        ["preset=packed-4096", "mode=none,layer", "compile=none,regional", "measure.steps=10"],
        ["preset=tiny", "mode=layer", "compile=none,regional"],
        4,
        2,
    ),
    "attention": (
        ["preset=packed-4096", "mode=none", "attention=auto,math,flash,efficient,cudnn", "measure.numerics=true"],
        ["preset=tiny", "mode=none", "attention=auto,math", "measure.numerics=true"],
        5,
        2,
    ),
    "batch": (
        ["preset=packed-1024", "mode=none", "+shape.batch=1,2,4,8"],
        ["preset=tiny", "mode=none", "+shape.batch=1,2"],
        4,
        2,
    ),
}


def studies(device: str, out: Path) -> Outcome:
    problems, table = [], ["| study | setting | status | sec/step | peak GiB | figure |", "|---|---|---|---|---|---|"]
    figures = {}
    for study, (on_gpu, on_cpu, gpu_cells, cpu_cells) in STUDIES.items():
        run = f"{RUN}-{study}"
        done = sweep_cli(
            out, "sweep=none", *(on_gpu if _cuda(device) else on_cpu), f"device={device}",
            "measure.warmup_steps=2", f"run.name={run}",
        )  # fmt: skip
        if done.returncode:
            problems.append(f"{study}: ckpt-sweep run exited with {done.returncode}: {done.stderr.strip()[-200:]}")
        rows = cells(out, run)
        if len(rows) != (gpu_cells if _cuda(device) else cpu_cells):
            problems.append(f"{study}: {len(rows)} cells measured")
        for cell in rows:
            setting, figure = _describe(study, cell)
            figures[f"{study}/{setting}"] = figure
            peak = "" if cell["peak_bytes"] is None else f"{cell['peak_bytes'] / GIB:.2f}"
            seconds = "" if cell["sec_per_step"] is None else f"{cell['sec_per_step']:.4f}"
            table.append(f"| {study} | {setting} | {cell['status']} | {seconds} | {peak} | {figure} |")
            if cell["status"] not in ("ok", "unsupported"):  # a backend the device lacks is unsupported
                problems.append(f"{study} {setting}: {cell['status']}: {cell['reason']}")
    details = [f"{len(table) - 2} cells through ckpt-sweep run (runs {RUN}-compile, -attention, -batch)"]
    return _verdict("studies", problems, details, table=table, figures=figures)


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
