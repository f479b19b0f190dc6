"""`measure.profile=true`: a short torch.profiler capture of a few steps after the timed ones
(profiled steps are never timed), summarised the way the docs' H200 trace is (kernels active
93.1% of the captured interval, 70.5% of kernel time in GEMM, 9.7% in attention), and the trace
kept as a file by cell key.

On CUDA the summary reads device kernels; on a CPU, operator self time stands in for kernel time
(a CPU copies synchronously, so all its copy time is exposed).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

GEMM = re.compile(r"\b(aten::(addmm|mm|bmm|baddbmm|matmul|linear|_scaled_mm|convolution))\b|gemm|cutlass|xmma", re.I)
ATTENTION = re.compile(r"attention|sdpa|flash|fmha", re.I)
COPY = re.compile(r"^(aten::copy_|aten::_to_copy|Memcpy|cudaMemcpy)", re.I)
TOP = 5


@dataclass(frozen=True)
class Interval:
    """One timed event of a trace: what the summary needs of a profiler event."""

    name: str
    start_us: float
    end_us: float
    device: bool  # a device kernel or copy (CUDA), not a host operator

    @property
    def us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class ProfileSummary:
    steps: int
    interval_s: float  # wall time of the profiled steps
    kernel_s: float  # busy time of kernels (CUDA) or operators (CPU), overlaps merged
    kernel_active_share: float  # kernel_s / interval_s
    gemm_share: float  # of kernel time
    attention_share: float
    copy_s: float
    exposed_copy_s: float  # copy time with no kernel running beside it
    top_ops: list[tuple[str, float]]  # (name, self seconds), largest first
    trace: str | None = None  # the trace file, relative to the database's folder

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(
    events: Iterable[Interval],
    interval_s: float,
    steps: int,
    on_device: bool,
    self_us: dict[str, float] | None = None,
) -> ProfileSummary:
    """The summary of one capture. `on_device`: read device kernels (CUDA) rather than host ops.
    `self_us`: time by op name excluding its children (host ops nest); None: each event's own."""
    events = [e for e in events if e.device == on_device and e.us > 0]
    copies = [e for e in events if COPY.search(e.name)]
    kernels = [e for e in events if not COPY.search(e.name)]
    kernel_us = _union(kernels)
    if self_us is None:
        self_us = {}
        for event in kernels:
            self_us[event.name] = self_us.get(event.name, 0.0) + event.us
    by_name = {name: us for name, us in self_us.items() if not COPY.search(name) and us > 0}
    total = sum(by_name.values()) or 1.0
    copy_us = _union(copies)
    exposed_us = copy_us - _intersection(copies, kernels) if on_device else copy_us
    return ProfileSummary(
        steps=steps,
        interval_s=interval_s,
        kernel_s=kernel_us / 1e6,
        kernel_active_share=min(1.0, kernel_us / 1e6 / interval_s) if interval_s else 0.0,
        gemm_share=sum(us for name, us in by_name.items() if GEMM.search(name)) / total,
        attention_share=sum(us for name, us in by_name.items() if ATTENTION.search(name) and not GEMM.search(name))
        / total,
        copy_s=copy_us / 1e6,
        exposed_copy_s=exposed_us / 1e6,
        top_ops=[(name, us / 1e6) for name, us in sorted(by_name.items(), key=lambda kv: -kv[1])[:TOP]],
    )


def _merged(events: list[Interval]) -> list[tuple[float, float]]:
    spans: list[list[float]] = []
    for start, end in sorted((e.start_us, e.end_us) for e in events):
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    return [(a, b) for a, b in spans]


def _union(events: list[Interval]) -> float:
    return sum(end - start for start, end in _merged(events))


def _intersection(a: list[Interval], b: list[Interval]) -> float:
    total, spans = 0.0, _merged(b)
    for start, end in _merged(a):
        for other_start, other_end in spans:
            total += max(0.0, min(end, other_end) - max(start, other_start))
    return total


def host_ops(profiler) -> list[Interval]:
    """Host operators at the top of their stack (an op's children would count its time twice)."""
    events = profiler.events()
    return [
        Interval(e.name, e.time_range.start, e.time_range.end, device=False)
        for e in events
        if e.cpu_parent is None and e.device_type.name == "CPU"
    ]


def host_self_times(profiler) -> dict[str, float]:
    """Each host op's time excluding the ops it called, by name (microseconds)."""
    return {e.key: float(e.self_cpu_time_total) for e in profiler.key_averages() if e.device_type.name == "CPU"}


def device_kernels(profiler) -> list[Interval]:
    return [
        Interval(k.name, k.time_range.start, k.time_range.end, device=True)
        for e in profiler.events()
        for k in e.kernels
    ]


def profile_steps(step: Callable, device, steps: int, trace_path: Path | None, on_cuda: bool) -> ProfileSummary:
    """Run `steps` more steps under torch.profiler; summarise them and write the trace."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as profiler:
        device.synchronize()
        tic = time.perf_counter()
        for _ in range(steps):
            step()
        device.synchronize()
        interval_s = time.perf_counter() - tic
    if on_cuda:
        summary = summarize(device_kernels(profiler), interval_s, steps, on_device=True)
    else:
        summary = summarize(host_ops(profiler), interval_s, steps, False, host_self_times(profiler))
    if trace_path is not None:
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(trace_path))
        summary = ProfileSummary(**{**summary.as_dict(), "trace": trace_path.name})
    return summary
