"""The measure scenario: build the cell's workload, apply its mode, warm up, time the steps.

Each timed step is bracketed by a synchronisation of the cell's device, so a sample is the step's
device time; the peaks and accumulated counters are reset after warmup, so they describe the
measured steps (the first step's peak is kept apart: it can be the real peak).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from ckptlib.units import GIB
from sweep.config.builders import wrong_type
from sweep.store.results import CellResult, step_statistics
from sweep.vocabulary import Status

from .common import build_kwargs, run_scenario
from .predict import over_card, predict
from .profile import profile_steps


@dataclass(frozen=True)
class MeasureSettings:
    device: str  # cpu, cuda, cuda:N
    warmup_steps: int
    steps: int
    skip_predicted_oom: bool = False  # predict first; a cell predicted over the card is not run
    card_bytes: int | None = None  # the card for that (None: what CUDA can allocate on the device)
    host_budget_bytes: int | None = None  # a CPU cell predicted to need more host memory is not run
    numerics: bool = False  # loss and gradient error against an fp32 math reference, after the steps
    profile_steps: int = 0  # steps profiled after the timed ones (0: none)
    trace_dir: str | None = None  # where a profiled cell's trace goes (<cell key>.json)


def _quiet(phase: str) -> None:
    pass


def timed_steps(
    step: Callable,
    device,
    warmup_steps: int,
    steps: int,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[str], None] = _quiet,
    watch: Mapping[int, Callable[[], contextlib.AbstractContextManager]] = MappingProxyType({}),
) -> tuple[list[tuple[float, bool]], list[float], int | None]:
    """(samples as (seconds, warmup), losses, first step's peak) of `warmup_steps + steps` calls of
    `step`; the call of index i runs inside `watch[i]()` where there is one."""
    samples, losses, first_step_peak = [], [], None
    device.reset_peaks()
    for i in range(warmup_steps + steps):
        progress(f"warmup {i + 1}/{warmup_steps}" if i < warmup_steps else f"step {i - warmup_steps + 1}/{steps}")
        if i == warmup_steps:
            device.start_measured_steps()
        device.synchronize()
        tic = clock()
        with watch.get(i, contextlib.nullcontext)():
            loss = step()
        device.synchronize()
        samples.append((clock() - tic, i < warmup_steps))
        losses.append(float(loss))
        if i == 0:
            first_step_peak = device.peak_bytes()
    return samples, losses, first_step_peak


ROUGH_SHARE = 0.25  # a CPU cell whose rough bound is under this share of the host budget is not predicted


def host_bounds(cell, build) -> tuple[int, int]:
    """Cheap bounds on a CPU cell's memory from a build on the meta device: (its weights, which it
    needs at the least; a generous bound: weights with their gradients and AdamW moments, and for
    each block some 32 copies of the inputs' size). Built unquantized: larger, so still an upper
    bound, and a quantization package imported on meta would miss the settings it needs on a CPU
    (ckptlib.quantize: cpu_environment). Built frozen: the base weights alone, still a lower bound,
    and 4 x the base covers a LoRA's adapters with their gradients and moments; PEFT's injection
    would cost more than the rest of the build."""
    from torch.utils._pytree import tree_leaves

    work = build(device="meta", **{**build_kwargs(cell), "quantization": "none", "training": "frozen"})
    weights = sum(p.numel() * p.element_size() for p in work.model.parameters())
    inputs = sum(t.numel() * t.element_size() for t in tree_leaves((work.args, work.kwargs)) if hasattr(t, "numel"))
    blocks = sum(len(work.model.get_submodule(path)) for path in work.spec.block_lists)
    return weights, 4 * weights + 32 * inputs * max(1, blocks)


def _over_host(need: str, budget_bytes: int) -> str:
    return (
        f"{need} GiB of host memory, more than the {budget_bytes / GIB:.2f} GiB this host has free "
        "(run.allow_large_cpu=true measures it anyway)"
    )


def _predicted_not_to_fit(
    cell, config, build, settings: MeasureSettings, skip_over_bytes: int | None, timings: dict
) -> CellResult | None:
    """Predict the cell first: skipped (predicted-oom) when it would not fit the card, or, on a CPU,
    the host's free memory. A cell that cannot be predicted is measured; so is a GPU cell with a
    quantized base (its prediction would import the quantizer with the CPU settings it needs on
    meta, before the GPU build); a CPU cell that is small by a rough bound is not predicted at all
    (a prediction costs a second)."""
    from ckptlib import UnsupportedModeError

    if cell.quantization != "none" and not settings.device.startswith("cpu"):
        return None
    tic = time.perf_counter()
    if skip_over_bytes is None:
        budget = settings.host_budget_bytes
        weights, rough = host_bounds(cell, build)
        timings["predict_s"] = time.perf_counter() - tic
        if cell.quantization == "none" and weights > budget:  # no prediction needed (a 12B one takes 15 s)
            reason = _over_host(f"its weights alone need {weights / GIB:.2f}", budget)
            return CellResult(Status.PREDICTED_OOM, reason, timings=timings)
        if rough < ROUGH_SHARE * budget:
            return None
    try:
        prediction = predict(cell, config, build, "cuda" if settings.device.startswith("cuda") else "cpu")
    except UnsupportedModeError:
        return None
    finally:
        timings["predict_s"] = time.perf_counter() - tic
    reason = None
    if skip_over_bytes is not None and not prediction.fits(skip_over_bytes):
        reason = over_card(prediction, skip_over_bytes)
    elif settings.host_budget_bytes is not None and prediction.peak_bytes > settings.host_budget_bytes:
        reason = _over_host(f"predicted to need {prediction.peak_bytes / GIB:.2f}", settings.host_budget_bytes)
    if reason is None:
        return None
    return CellResult(Status.PREDICTED_OOM, reason, breakdown=prediction.breakdown, timings=timings)


@contextlib.contextmanager
def cold_compile_cache(compiling: bool) -> Iterator[None]:
    """A compiled cell compiles into an empty Inductor cache of its own, so its first step shows the
    whole compile time, whatever cells ran before it on this host."""
    if not compiling:
        yield
        return
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="ckpt-sweep-inductor-") as folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
        try:
            yield
        finally:
            if before is None:
                del os.environ["TORCHINDUCTOR_CACHE_DIR"]
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


# NOTE [ What the last warmup step watches ]: besides its timed steps a cell needs which SDPA
# kernels ran (modes watching a training step) and, on a CPU, its peak (a step under the live-tensor
# tracker). Watching slows a step, so no timed step is watched, nor the first (its time is the
# first-step column). With two warmup steps or more (the default is 5), an uncompiled cell's last
# warmup step is watched for both: a step the cell runs anyway, after one whose optimizer step left
# the state every later step starts from. Otherwise the cell runs one step more, after its timed
# steps, watched for both; eager for a compiled cell, since the tracker sees no compiled code's
# buffers (said so in the compile table).
def step_watch(work, device) -> tuple[dict, Callable[[], contextlib.AbstractContextManager]]:
    """(what the watch saw once a step ran under it: `backends`, `tracker`; the watch)."""
    from ckptlib import attention

    seen = {}

    @contextlib.contextmanager
    def watch() -> Iterator[None]:
        with attention.watching_backends() as backends, device.tracking(work) as tracker:
            seen.update(backends=backends, tracker=tracker)
            yield

    return seen, watch


def warmup_is_watched(cell, settings: MeasureSettings) -> bool:
    return cell.compile == "none" and settings.warmup_steps >= 2


def measure_cell(fields: dict, settings: MeasureSettings, progress: Callable[[str], None] = _quiet) -> CellResult:
    """Runs inside the cell's child process; `progress` hears its phase (build, warmup i/n, step i/n)."""
    import ckptlib
    from ckptlib import attention
    from ckptlib.quantize import base_weight_bytes

    def scenario(cell, config, build, device):
        with cold_compile_cache(cell.compile != "none"):
            return measured(cell, config, build, device)

    def measured(cell, config, build, device):
        import torch

        timings = {}
        skip_over = (settings.card_bytes or device.total_bytes()) if settings.skip_predicted_oom else None
        if skip_over is not None or settings.host_budget_bytes is not None:
            progress("predict")
            skipped = _predicted_not_to_fit(cell, config, build, settings, skip_over, timings)
            if skipped is not None:
                return skipped
        progress("build")
        tic = time.perf_counter()
        work = build(device=settings.device, **build_kwargs(cell))
        if not isinstance(work, ckptlib.Workload):
            raise TypeError(wrong_type(work))
        handle = ckptlib.apply(work.model, config, work.spec, compile=cell.compile)
        timings["build_s"] = time.perf_counter() - tic
        with attention.attention_backend(cell.attention), attention.refused_kernels(cell.attention):
            seen, watch = step_watch(work, device)
            in_warmup = warmup_is_watched(cell, settings)  # NOTE [ What the last warmup step watches ]
            samples, losses, first_step_peak = timed_steps(
                work.step,
                device,
                settings.warmup_steps,
                settings.steps,
                progress=progress,
                watch={settings.warmup_steps - 1: watch} if in_warmup else {},
            )
            if not in_warmup:
                progress("memory")
                tic = time.perf_counter()
                with torch.compiler.set_stance("force_eager"), watch():
                    work.step()
                timings["memory_step_s"] = time.perf_counter() - tic
            ran = seen["backends"].text()
            memory = device.memory(seen["tracker"])
            profiled = None
            if settings.profile_steps:
                progress("profile")
                trace = Path(settings.trace_dir) / f"{cell.key}.json" if settings.trace_dir else None
                on_cuda = str(settings.device).startswith("cuda")
                profiled = profile_steps(work.step, device, settings.profile_steps, trace, on_cuda).as_dict()
        report = handle.report
        errors = {}
        if settings.numerics:  # after the timed steps (a compiled cell's first step compiles), on copies
            progress("numerics")
            handle.remove()  # the reference is the model as built, not checkpointed
            found = attention.numerics(work, config, cell.attention, ckptlib.apply, cell.compile)
            errors = {"loss_rel_error": found.loss_rel_error, "grad_rel_error": found.grad_rel_error}
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
            attention_backend=ran,
            profile=profiled,
            **errors,
            host_load=device.load(),
            timings=timings,
        )

    return run_scenario(fields, scenario, settings.device)
