"""Keeps a CPU from being handed a GPU's work: what the host has free (cells predicted to need more
are skipped as predicted-oom, see sweep/run/scenarios/measure.py), and a rough duration when a sweep
sized for GPUs is about to run on a CPU."""

from __future__ import annotations

import time

from ckptlib import available_host_bytes

HOST_SHARE = 0.9  # of MemAvailable: a cell must leave the rest to the OS and the harness


def host_budget_bytes() -> int | None:
    available = available_host_bytes()
    return None if available is None else int(available * HOST_SHARE)


def matmul_rate() -> float:
    """This CPU's fp32 matmul rate in FLOP/s (a 0.1 s measurement)."""
    import torch

    a = torch.randn(512, 512)
    a @ a  # warm
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < 0.1:
        a @ a
        count += 1
    return count * 2 * 512**3 / (time.perf_counter() - started)


def step_flops(builder, preset: str, shape: dict) -> float | None:
    """6 x parameters x tokens x batch: a training step's FLOPs by the usual rule of thumb."""
    from sweep.config.builders import describe_shape

    facts = describe_shape(builder, preset, shape)
    try:
        work = builder(
            preset=preset, training="full", device="meta", lora_rank=4, seed=0, dtype=None, quantization="none", **shape
        )
    except Exception:  # noqa: BLE001 - no estimate for this one
        return None
    parameters = sum(p.numel() for p in work.model.parameters())
    return 6.0 * parameters * (facts["tokens"] or 1) * (facts["batch"] or 1)


def duration_hours(flops_per_step: list[float], cells: int, steps: int) -> float:
    """Hours for `cells` cells of `steps` steps, the step cost averaged over the distinct shapes."""
    mean = sum(flops_per_step) / len(flops_per_step)
    return cells * steps * mean / matmul_rate() / 3600


def gpu_sweep_warning(jobs: list, total: int) -> str | None:
    """One line when a sweep sized for GPUs is about to measure on this CPU, with a rough duration."""
    from omegaconf import OmegaConf

    from sweep.config.builders import BuilderError, import_builder
    from sweep.machine import environment

    from .preflight import job_value

    measuring = [
        j for j in jobs if j.run.sized_for_gpu and not j.predict and environment.resolve_device(j.device) == "cpu"
    ]
    if not measuring:
        return None
    flops = []
    for job in measuring:
        try:
            estimate = step_flops(
                import_builder(job.family._target_), str(job.preset), OmegaConf.to_container(job.shape)
            )
        except BuilderError:
            estimate = None
        flops += [estimate] if estimate else []
    steps = measuring[0].measure.warmup_steps + measuring[0].measure.steps
    budget = host_budget_bytes()
    name = job_value(measuring[0], "run.name")
    duration = f", roughly {duration_hours(flops, total, steps):.1f} h at this CPU's matmul rate" if flops else ""
    memory = f"the {budget / 2**30:.1f} GiB of host memory free" if budget else "the host's free memory"
    line = (
        f"sweep {name!r} is sized for GPUs and measures on this CPU ({total} cells x {steps} steps{duration}); "
        f"cells predicted to need more than {memory} are skipped as predicted-oom. On a GPU machine it runs on the "
        "GPU (device=auto)."
    )
    return line
