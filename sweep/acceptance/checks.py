"""The core acceptance checks. Each runs in its own process (see __init__), on `cuda` at the docs'
scale or, tiny, on a CPU (or in the suite, on a fake CUDA host), and returns an CheckResult: ok, failed,
or skipped with the reason."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ckptlib.units import GIB
from sweep.vocabulary import Provenance, Status

from .common import RUN, CheckResult, CheckStatus, Target, cells, exited, one_line, sweep_cli, verdict

# ---- fork server ------------------------------------------------------------------------------


def fork_server(target: Target, out: Path) -> CheckResult:
    from sweep.run.isolation import preload_failures, run_isolated

    from .probes import fork_probe

    device = target.device
    result = run_isolated(fork_probe, (device,), 120, "ckptlib.families.builders")
    report = result.report or {}
    problems = [] if result.status == Status.OK else [f"probe {result.status}: {one_line(result.reason)}"]
    if report.get("initialized_at_start") or report.get("bad_fork_at_start"):
        problems.append(f"CUDA was initialised before the child touched it: {report}")
    if report and not report.get("allocated"):
        problems.append("the child could not allocate on the device")
    if preload_failures:
        problems.append(f"the fork server could not preload: {preload_failures}")
    details = [
        f"child started with CUDA initialised={report.get('initialized_at_start')}, "
        f"bad fork={report.get('bad_fork_at_start')}; allocated on {device}: {report.get('allocated')}"
    ]
    if target.cuda and report:
        if report["torch_uuid"] != report["nvml_uuid"]:
            problems.append(f"torch sees GPU {report['torch_uuid']}, NVML {report['nvml_uuid']}")
        details.append(f"GPU UUID torch {report['torch_uuid']} / NVML {report['nvml_uuid']}")
    else:
        details.append("UUID comparison skipped: no CUDA device")
    return verdict("fork_server", problems, details)


# ---- offload numerics and ordering -------------------------------------------------------------

OFFLOAD_MODES = ("none", "layer", "unsloth", "unsloth-ffn", "seg2-stride4-offload")


def _gradients(target: Target, config, steps: int = 3):
    import torch

    import ckptlib
    from ckptlib import synthetic

    if target.tiny:
        shape, dtype = synthetic.SyntheticShape(width=64, heads=4, depth=4, tokens=64), torch.float32
    else:
        shape = synthetic.SyntheticShape(width=3072, heads=24, depth=4, tokens=4096)
        dtype = torch.bfloat16
    work = synthetic.build(shape, training="full", device=target.device, dtype=dtype, seed=7)
    work.optimizer = None
    handle = ckptlib.apply(work.model, config, work.spec) if config is not None else None
    for _ in range(steps):
        work.model.zero_grad(set_to_none=True)
        work.step()
    grads = {n: p.grad.float() for n, p in work.model.named_parameters()}
    return grads, (handle.report if handle else None)


def _max_difference(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


class DelayedCopies:
    """CUDA streams whose copy stream sleeps before each device-to-host copy: a race between the
    copy and the compute stream, if the ordering lets one happen, shows up in the gradients."""

    def __init__(self, streams, cycles: int):
        self.streams, self.cycles = streams, cycles

    def __getattr__(self, name):
        return getattr(self.streams, name)

    def to_host(self, host, source):
        import torch

        torch.cuda._sleep(self.cycles)
        self.streams.to_host(host, source)


def offload(target: Target, out: Path) -> CheckResult:
    import torch

    from ckptlib import streams
    from ckptlib.modes import MODES

    reference, _ = _gradients(target, None)
    tolerance = 0.0 if target.tiny else 2e-2  # bf16 kernels on CUDA need not be bitwise; tiny runs fp32
    problems, table = (
        [],
        ["| mode | max abs grad difference vs none | pinned MiB | pin failures | pageable |", "|---|---|---|---|---|"],
    )
    for mode in OFFLOAD_MODES[1:]:
        config = MODES[mode]
        grads, report = _gradients(target, config)
        difference = _max_difference(grads, reference)
        scale = max(float(g.abs().max()) for g in reference.values())
        pool = report.pool
        table.append(
            f"| {mode} | {difference:.3g} | {pool.get('peak_pinned_bytes', 0) / 2**20:.1f} | "
            f"{pool.get('pin_failures', 0)} | {pool.get('pageable_fallbacks', 0)} |"
        )
        if difference > tolerance * scale:
            problems.append(f"{mode}: gradients differ from none by {difference:.3g} (scale {scale:.3g})")
        if target.cuda and config.uses_offload:
            if not pool.get("peak_pinned_bytes"):
                problems.append(f"{mode}: nothing was pinned")
            if pool.get("pin_failures") or pool.get("pageable_fallbacks"):
                problems.append(
                    f"{mode}: {pool.get('pin_failures')} pin failures, "
                    f"{pool.get('pageable_fallbacks')} pageable fallbacks"
                )
    details = [
        f"{len(OFFLOAD_MODES) - 1} modes against none, 3 steps each, "
        + ("tiny, fp32 (bitwise)" if target.tiny else "width 3072, 4 layers, 4096 tokens, bf16")
    ]
    if target.cuda:
        plain, _ = _gradients(target, MODES["unsloth"])
        original = streams.streams_for
        streams.streams_for = lambda d: (
            DelayedCopies(original(d), cycles=50_000_000) if d.type == "cuda" else original(d)
        )
        try:
            delayed, _ = _gradients(target, MODES["unsloth"])
        finally:
            streams.streams_for = original
        difference = _max_difference(delayed, plain)
        details.append(
            f"unsloth with a 50M-cycle sleep before each device-to-host copy: max difference {difference:.3g}"
        )
        if difference > tolerance * max(float(g.abs().max()) for g in plain.values()):
            problems.append(f"a delayed copy stream changed unsloth's gradients by {difference:.3g}")
        torch.cuda.synchronize()
    else:
        details.append("pinned-memory and delayed-copy-stream checks skipped: they need CUDA")
    return verdict("offload", problems, details, table=table)


# ---- the harness ---------------------------------------------------------------------------------


def harness(target: Target, out: Path) -> CheckResult:
    device = target.device
    presets = "tiny" if target.tiny else "docs-packed-4096,docs-packed-16384"
    expected = len(presets.split(",")) * 3  # none, layer, unsloth
    common = [
        "sweep=none",
        f"preset={presets}",
        "mode=none,layer,unsloth",
        "training=frozen",
        f"run.name={RUN}-harness",
    ]
    measured = sweep_cli(
        out, *common, f"device={device}", "measure.warmup_steps=2", f"measure.steps={3 if target.tiny else 5}"
    )
    predicted = sweep_cli(out, *common, "predict=true", f"predict_device={'cuda' if target.cuda else 'cpu'}")
    problems = exited(measured) + exited(predicted)
    rows = cells(out, f"{RUN}-harness")
    predictions = {c["cell_key"]: c["peak_bytes"] for c in cells(out, f"{RUN}-harness", Provenance.PREDICTED)}
    table = [
        "| preset | mode | sec/step | peak GiB | first-step peak GiB | predicted GiB | measured/predicted - 1 |",
        "|---|---|---|---|---|---|---|",
    ]
    errors = {}
    for cell in rows:
        if cell["status"] != Status.OK:
            problems.append(f"{cell['preset']} {cell['mode']}: {cell['status']}: {one_line(cell['reason'])}")
            continue
        if not cell["peak_bytes"] or (target.cuda and not cell["first_step_peak_bytes"]):
            problems.append(f"{cell['preset']} {cell['mode']}: no peak recorded")
        predicted_peak = predictions.get(cell["cell_key"])
        error = cell["peak_bytes"] / predicted_peak - 1 if predicted_peak else None
        errors[f"{cell['preset']}/{cell['mode']}"] = error
        first = "" if cell["first_step_peak_bytes"] is None else f"{cell['first_step_peak_bytes'] / GIB:.2f}"
        table.append(
            f"| {cell['preset']} | {cell['mode']} | {cell['sec_per_step']:.4f} | {cell['peak_bytes'] / GIB:.2f} | "
            f"{first} | {(predicted_peak or 0) / GIB:.2f} | {'' if error is None else f'{error:+.1%}'} |"
        )
    if len(rows) != expected:
        problems.append(f"{len(rows)} measured cells, expected {expected}")
    within = [k for k, e in errors.items() if e is not None and abs(e) <= 0.05]
    details = [
        f"{len(rows)} cells measured through ckpt-sweep run into results.db (run {RUN}-harness); "
        f"{len(within)} of {len(errors)} within 5% of their prediction"
    ]
    by_mode = {(c["preset"], c["mode"]): c for c in rows if c["status"] == Status.OK}
    largest = presets.split(",")[-1]
    if all((largest, m) in by_mode for m in ("none", "layer", "unsloth")):
        none, layer, unsloth = (by_mode[(largest, m)] for m in ("none", "layer", "unsloth"))
        details.append(
            f"{largest}: torch layer {layer['sec_per_step'] / none['sec_per_step']:.3f}x no checkpoint "
            f"(docs, H100: 1.27x); unsloth layer {unsloth['sec_per_step'] / layer['sec_per_step'] - 1:+.1%} "
            f"time and {(unsloth['peak_bytes'] - layer['peak_bytes']) / GIB:+.2f} GiB vs torch layer "
            "(docs, H100: +4.5%, -1.3 GiB)"
        )
    return verdict("harness", problems, details, table=table, figures={"prediction_error": errors})


# ---- out of memory -----------------------------------------------------------------------------


def oom(target: Target, out: Path) -> CheckResult:
    device = target.device
    preset, huge = ("tiny", 2**26) if target.tiny else ("docs-packed-4096", 512)
    expected = Status.OOM if target.cuda else Status.HOST_OOM
    returncode = sweep_cli(
        out,
        "sweep=none",
        f"preset={preset}",
        "mode=none",
        "training=frozen",
        f"device={device}",
        f"+shape.batch={huge},1",
        "measure.warmup_steps=1",
        "measure.steps=1",
        f"run.name={RUN}-oom",
        "run.allow_large_cpu=true",  # on a CPU the guard would predict it: the check wants the measured path
    )
    rows = cells(out, f"{RUN}-oom")
    statuses = [(c["config"]["shape"].get("batch"), c["status"]) for c in rows]
    problems = exited(returncode)
    if statuses != [(huge, expected), (1, Status.OK)]:
        problems.append(f"statuses {statuses}, expected {[(huge, str(expected)), (1, str(Status.OK))]}")
    reason = one_line(rows[0]["reason"])[:160] if rows else None
    details = [
        f"batch {huge}: {statuses[0][1] if statuses else '?'} ({reason}); then batch 1: "
        f"{statuses[1][1] if len(statuses) > 1 else '?'}"
    ]
    if rows and target.cuda:
        details.append(f"allocator peak at the OOM: {(rows[0]['peak_at_oom_bytes'] or 0) / GIB:.2f} GiB")
    return verdict("oom", problems, details)


# ---- quantization --------------------------------------------------------------------------------

QUANTIZATIONS = ("none", "int8-torchao", "fp8-torchao", "int8-sdnq")


def quantization(target: Target, out: Path) -> CheckResult:
    from sweep.machine import gpus

    device = target.device
    preset = "tiny-wide" if target.tiny else "docs-packed-1024"
    returncode = sweep_cli(
        out,
        "sweep=none",
        f"preset={preset}",
        "mode=none,layer",
        f"quantization={','.join(QUANTIZATIONS)}",
        "dtype=bf16",
        "training=lora",
        f"device={device}",
        "measure.warmup_steps=2",
        "measure.steps=3",
        "measure.timeout_s=600",
        f"run.name={RUN}-quantization",
    )
    rows = cells(out, f"{RUN}-quantization")
    fp8_runs = target.cuda and (gpus.gpu_for(device).capability or (0, 0)) >= (8, 9)  # NVML: no CUDA context here
    problems = exited(returncode)
    bf16 = {c["mode"]: c["weight_bytes"] for c in rows if c["quantization"] == "none" and c["status"] == Status.OK}
    table = [
        "| precision | mode | status | weight bytes / bf16 | build s | first step s | sec/step |",
        "|---|---|---|---|---|---|---|",
    ]
    for cell in rows:
        expected = Status.UNSUPPORTED if cell["quantization"] == "fp8-torchao" and not fp8_runs else Status.OK
        if cell["status"] != expected:
            reason = one_line(cell["reason"])
            problems.append(f"{cell['quantization']} {cell['mode']}: {cell['status']} ({reason}), expected {expected}")
        ratio = cell["weight_bytes"] / bf16[cell["mode"]] if cell["weight_bytes"] and bf16.get(cell["mode"]) else None
        if cell["status"] == Status.OK and cell["quantization"] != "none" and not (ratio and 0.45 <= ratio <= 0.6):
            problems.append(f"{cell['quantization']} {cell['mode']}: weight bytes {ratio} of bf16, expected about half")
        figures = (ratio, cell["timings"].get("build_s"), cell["first_step_s"], cell["sec_per_step"])
        shown = ["" if value is None else f"{value:.{digits}f}" for value, digits in zip(figures, (3, 1, 2, 4))]
        table.append(f"| {cell['quantization']} | {cell['mode']} | {cell['status']} | {' | '.join(shown)} |")
    sdnq = [c for c in rows if c["quantization"] == "int8-sdnq" and c["status"] == Status.OK]
    details = [f"{len(rows)} cells; fp8-torchao {'runs' if fp8_runs else 'is expected unsupported'} here"]
    if sdnq:
        details.append(
            "SDNQ build + first step (compilation lands there): "
            + ", ".join(f"{c['mode']} {c['timings'].get('build_s', 0) + (c['first_step_s'] or 0):.1f} s" for c in sdnq)
        )
    return verdict("quantization", problems, details, table=table)


# ---- every family ------------------------------------------------------------------------------


def families(target: Target, out: Path) -> CheckResult:
    import torch

    import ckptlib
    from ckptlib.families import all_families, build
    from ckptlib.modes import MODES

    device = target.device
    problems, ran, without_class = [], 0, []
    chosen = {n: f for n, f in all_families().items() if not target.families or n in target.families}
    for name, family in sorted(chosen.items()):
        if family.unsupported:
            without_class.append(name)
            continue
        for mode in ("none", "unsloth"):
            try:
                work = build(name, "tiny", device=device, dtype=torch.bfloat16)
                ckptlib.apply(work.model, MODES[mode], work.spec)
                loss = work.step()
                if not torch.isfinite(loss):
                    problems.append(f"{name} {mode}: loss {float(loss)}")
                ran += 1
            except Exception as error:  # noqa: BLE001 - every family is tried
                problems.append(f"{name} {mode}: {type(error).__name__}: {str(error)[:200]}")
    details = [
        f"{ran} family x mode steps in bf16 on {device}; no diffusers class (unsupported by design): "
        f"{', '.join(without_class)}"
    ]
    return verdict("families", problems, details)


# ---- environment -------------------------------------------------------------------------------


# NVML's total over torch's (cudaGetDeviceProperties): what the driver keeps for itself, a little
# more than CUDA hands out on every card (H100 80GB: 81,559 MiB vs 81,080; H200: 143,771 vs 143,156).
NVML_OVER_TORCH = 0.02


def memory_totals_agree(torch_bytes: int | None, nvml_bytes: int | None) -> bool:
    return bool(torch_bytes and nvml_bytes) and 0 <= nvml_bytes - torch_bytes <= NVML_OVER_TORCH * torch_bytes


def environment(target: Target, out: Path) -> CheckResult:
    device = target.device
    if not target.cuda:
        return CheckResult(
            "environment", CheckStatus.SKIPPED, ["the hardware label and UUID checks need a CUDA device"]
        )
    from sweep.machine import gpus
    from sweep.run.isolation import run_isolated

    from .probes import fork_probe

    # the probe trains nothing: its fork server need not preload PEFT (1.5 CPU-s of the check otherwise)
    report = run_isolated(fork_probe, (device,), 120, "ckptlib.synthetic", trainings=()).report or {}
    problems = []
    gpu = gpus.gpu_for(device)
    with sqlite3.connect(out / "results.db") as connection:
        labels = {
            row[0]
            for row in connection.execute("select hardware from runs where provenance = ?", (Provenance.MEASURED,))
        }
    if labels != {gpu.label}:
        problems.append(f"runs are labelled {sorted(labels)}, the card is {gpu.label!r}")
    if report.get("torch_uuid") != report.get("nvml_uuid"):
        problems.append(f"UUID: torch {report.get('torch_uuid')}, NVML {report.get('nvml_uuid')}")
    torch_memory, nvml_memory = report.get("torch_memory"), report.get("nvml_memory")
    if not memory_totals_agree(torch_memory, nvml_memory):
        problems.append(
            f"memory: torch {torch_memory} B, NVML {nvml_memory} B (NVML is expected 0 to "
            f"{NVML_OVER_TORCH:.0%} above torch)"
        )
    details = [
        f"label {gpu.label!r}; memory: torch {(torch_memory or 0) / GIB:.2f} GiB (what CUDA can allocate), "
        f"NVML {(nvml_memory or 0) / GIB:.2f} GiB; driver {gpu.driver}; capability {gpu.capability}"
    ]
    return verdict("environment", problems, details, figures={"torch_memory": torch_memory, "nvml_memory": nvml_memory})
