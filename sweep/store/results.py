"""The one result type: what a scenario (measure or predict) says about a cell. The store writes
its fields as columns, reports read them back; a new measured field is added here and nowhere else.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from statistics import fmean, quantiles
from typing import Any


@dataclass
class CellResult:
    status: str
    reason: str | None = None  # why a cell is not ok (one line)
    traceback: str | None = None  # the tail of a failure's traceback
    # Time: median, mean and IQR of the measured steps (warmup excluded), and the first step alone
    # (compilation, autotuning and allocator growth land there).
    sec_per_step: float | None = None
    mean_s: float | None = None
    iqr_s: float | None = None
    min_s: float | None = None  # the spread of the measured steps
    max_s: float | None = None
    first_step_s: float | None = None
    settle_steps: int | None = None  # steps before the first within SETTLED of sec/step (compilation's tail)
    warmup_steps: int | None = None
    steps: int | None = None
    final_loss: float | None = None
    # Memory, in bytes. On CUDA the allocator's counters; on CPU tracked live tensor bytes; for a
    # prediction the predicted peak.
    peak_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    first_step_peak_bytes: int | None = None
    peak_at_oom_bytes: int | None = None  # the allocator's peak when the device ran out
    alloc_retries: int | None = None  # cudaMalloc retries during the measured steps
    host_offload_peak_bytes: int | None = None  # host memory the offload pool held at its peak
    weight_bytes: int | None = None  # storage of the base weights (quantized or not)
    breakdown: dict[str, int] | None = None  # bytes by category at the peak
    device_name: str | None = None
    attention_backend: str | None = None  # the SDPA kernel(s) that ran: flash, math, ... (checked)
    # measure.numerics: against an fp32 math-backend reference of the same weights and inputs
    loss_rel_error: float | None = None
    grad_rel_error: float | None = None  # relative L2 error of every trainable gradient
    profile: dict[str, Any] | None = None  # measure.profile: the capture's summary (sweep/run/scenarios/profile.py)
    # The host's 1-minute load average over its cores when the measured steps ended: above 1, other
    # work competed for the CPU (reports flag such CPU cells).
    host_load: float | None = None
    report: dict[str, Any] | None = None  # the checkpoint handle's report of the last step
    plan: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)  # build_s, predict_s, child_s, wall_s, ...
    samples: list[tuple[float, bool]] = field(default_factory=list)  # (seconds, warmup) per step
    # The cell's shape facts (sweep/config/builders.py: describe_shape), told by the child that built
    # the model; stored in the shape columns.
    shape: dict[str, Any] | None = None

    def columns(self) -> dict[str, Any]:
        """Every field but the samples (stored as rows of their own) and the shape facts."""
        values = asdict(self)
        values.pop("samples")
        values.pop("shape")
        return values


SETTLED = 1.25  # a step within this factor of sec/step has settled


def step_statistics(samples: list[tuple[float, bool]]) -> dict[str, float | int | None]:
    """sec/step (the median), mean and IQR of the measured steps only; the first step's time, and
    how many steps (warmup included) ran before the first that took within SETTLED of sec/step."""
    measured = [seconds for seconds, warmup in samples if not warmup]
    statistics = {
        "first_step_s": samples[0][0] if samples else None,
        "warmup_steps": sum(1 for _, warmup in samples if warmup),
        "steps": len(measured),
    }
    if not measured:
        return {
            **statistics,
            **dict.fromkeys(("sec_per_step", "mean_s", "iqr_s", "min_s", "max_s", "settle_steps")),
        }
    q1, median, q3 = _quartiles(measured)
    return {
        **statistics,
        "settle_steps": next(i for i, (seconds, _) in enumerate(samples) if seconds <= SETTLED * median),
        "sec_per_step": median,
        "mean_s": fmean(measured),
        "iqr_s": q3 - q1,
        "min_s": min(measured),
        "max_s": max(measured),
    }


def _quartiles(values: list[float]) -> list[float]:
    """The quartiles as numpy's percentile computes them (linear between the closest ranks), without
    numpy's first call in each cell's process (8 ms)."""
    return quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3


def throughput(samples_per_step: int | None, sec_per_step: float | None) -> float | None:
    """Samples per second of a measured step (None where either is unknown)."""
    if not samples_per_step or not sec_per_step:
        return None
    return samples_per_step / sec_per_step
