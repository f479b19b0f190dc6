"""The measure scenario: build the cell's workload, apply its mode, warm up, time the steps.

Each timed step is bracketed by a synchronisation of the cell's device, so a sample is the step's
device time; the peaks and accumulated counters are reset after warmup, so they describe the
measured steps (the first step's peak is kept apart: it can be the real peak).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..results import CellResult, step_statistics
from ..status import Status
from .common import build_kwargs, run_scenario
from .devices import device_for
from .predict import over_card, predict


@dataclass(frozen=True)
class MeasureSettings:
    device: str  # cpu, cuda, cuda:N
    warmup_steps: int
    steps: int
    skip_over_bytes: int | None = None  # predict first; a cell predicted over this card is not run


def timed_steps(
    step: Callable, device, warmup_steps: int, steps: int, clock: Callable[[], float] = time.perf_counter
) -> tuple[list[tuple[float, bool]], list[float], int | None]:
    """(samples as (seconds, warmup), losses, first step's peak) of `warmup_steps + steps` calls of `step`."""
    samples, losses, first_step_peak = [], [], None
    device.reset_peaks()
    for i in range(warmup_steps + steps):
        if i == warmup_steps:
            device.start_measured_steps()
        device.synchronize()
        tic = clock()
        loss = step()
        device.synchronize()
        samples.append((clock() - tic, i < warmup_steps))
        losses.append(float(loss))
        if i == 0:
            first_step_peak = device.peak_bytes()
    return samples, losses, first_step_peak


def _predicted_over_card(cell, config, build, settings: MeasureSettings) -> CellResult | None:
    from ckptlib import UnsupportedModeError

    tic = time.perf_counter()
    try:
        prediction = predict(cell, config, build, "cuda" if settings.device.startswith("cuda") else "cpu")
    except UnsupportedModeError:  # not predictable (a quantized base): measure it
        return None
    if prediction.fits(settings.skip_over_bytes):
        return None
    return CellResult(
        Status.PREDICTED_OOM,
        over_card(prediction, settings.skip_over_bytes),
        breakdown=prediction.breakdown,
        timings={"predict_s": time.perf_counter() - tic},
    )


def measure_cell(fields: dict, settings: MeasureSettings) -> CellResult:
    """Runs inside the cell's child process."""
    import ckptlib
    from ckptlib.quantize import base_weight_bytes

    device = device_for(settings.device)

    def scenario(cell, config, build):
        if settings.skip_over_bytes is not None:
            skipped = _predicted_over_card(cell, config, build, settings)
            if skipped is not None:
                return skipped
        tic = time.perf_counter()
        work = build(device=settings.device, **build_kwargs(cell))
        handle = ckptlib.apply(work.model, config, work.spec)
        timings = {"build_s": time.perf_counter() - tic}
        samples, losses, first_step_peak = timed_steps(work.step, device, settings.warmup_steps, settings.steps)
        memory = device.memory(work)
        if "memory_step_s" in memory:
            timings["memory_step_s"] = memory.pop("memory_step_s")
        report = handle.report
        return CellResult(
            Status.OK,
            **step_statistics(samples),
            **memory,
            samples=samples,
            final_loss=losses[-1] if losses else None,
            first_step_peak_bytes=first_step_peak,
            host_offload_peak_bytes=report.pool.get("peak_held_bytes", 0),
            weight_bytes=base_weight_bytes(work.model),
            report=report.as_dict(),
            plan=report.plans,
            device_name=device.name(),
            timings=timings,
        )

    return run_scenario(fields, scenario, device)
