"""Run one cell in a fresh child process and map whatever happens to a status.

Children come from a fork server that has torch, ckptlib and peft imported already, so a cell
pays a fork, not an interpreter start; CUDA is initialised only in the child. The parent blocks
in `wait` on the result pipe and the child's sentinel (no polling) and never raises for an
expected outcome.
"""
from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import time
import traceback
from multiprocessing.connection import wait

import numpy as np

PRELOAD = ["torch", "ckptlib", "ckptlib.synthetic", "peft", "sweep.worker"]
# What a builder's module needs preloaded besides itself: every diffusers class for the families
# (5 s of imports a child would otherwise pay per cell).
PRELOAD_FOR = {"ckptlib.families.builders": ["ckptlib.families.classes"]}
TRACEBACK_CHARS = 4000
_OOM_MESSAGES = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "can't allocate memory",
                 "not enough memory", "out of memory")
_context = None


def fork_server(builder_module: str):
    """The fork server, started on first use with what the first cell's builder needs preloaded."""
    global _context
    if _context is None:
        _context = mp.get_context("forkserver")
        _context.set_forkserver_preload([*PRELOAD, builder_module, *PRELOAD_FOR.get(builder_module, [])])
    return _context


def run_isolated(task, cell: dict, args: tuple, timeout_s: float) -> dict:
    """`task(cell, *args)` (measure_cell or predict_cell) in a child process; returns its result
    dict, or one naming how the child ended, with at least `status` and `reason`."""
    ctx = fork_server(cell["builder"].rpartition(".")[0])
    receiver, sender = ctx.Pipe(duplex=False)
    # The fork server's environment is that of the first cell's launcher process; a launcher (Ray)
    # may since have assigned this process another GPU.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    child = ctx.Process(target=child_main, args=(sender, task, (cell, *args), visible), daemon=True)
    started = time.perf_counter()
    child.start()
    sender.close()
    try:
        ready = wait([receiver, child.sentinel], timeout=timeout_s)
        result = None
        if receiver in ready or receiver.poll():
            try:
                result = receiver.recv()
            except EOFError:
                result = None
        if result is None and not ready:
            child.kill()
            result = {"status": "timeout", "reason": f"no result within {timeout_s:g} s; child killed"}
        elif result is None:
            child.join(timeout=5)
            result = {"status": "crashed", "reason": _exit_reason(child.exitcode)}
        child.join(timeout=10)
    finally:
        if child.is_alive():
            child.kill()
            child.join()
        receiver.close()
    result["wall_s"] = time.perf_counter() - started
    return result


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "child did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (likely the host OOM killer)" if -code == signal.SIGKILL else ""
        return f"child died by {name}{hint} before reporting"
    return f"child exited with code {code} before reporting"


def child_main(conn, task, args: tuple, visible_devices: str | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt means
    if visible_devices is None:  # before anything initialises CUDA
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices
    gc.freeze()  # the preloaded heap is the fork server's: collections skip it (0.2 s each otherwise)
    started = time.perf_counter()
    result = task(*args)
    result.setdefault("timings", {})["child_s"] = time.perf_counter() - started
    conn.send(result)
    conn.close()


def measure_cell(cell: dict, device: str, warmup_steps: int, steps: int, skip_over_bytes: int | None = None) -> dict:
    """Build, apply the mode, warm up, measure. With `skip_over_bytes`, predict first and skip a
    cell whose predicted peak does not fit that card. Runs inside the child."""
    import ckptlib
    from ckptlib.quantize import base_weight_bytes

    def measure(spec, config, build):
        timings = {}
        if skip_over_bytes is not None:
            tic = time.perf_counter()
            try:
                prediction = _predict(spec, config, build, "cuda" if device.startswith("cuda") else "cpu")
            except ckptlib.UnsupportedModeError:  # not predictable (a quantized base): measure it
                prediction = None
            timings["predict_s"] = time.perf_counter() - tic
            if prediction is not None and not prediction.fits(skip_over_bytes):
                return {"status": "predicted-oom", "reason": _over_card(prediction, skip_over_bytes),
                        "breakdown": prediction.breakdown, "timings": timings}
        tic = time.perf_counter()
        work = build(preset=spec.preset, training=spec.training, device=device, lora_rank=spec.lora_rank,
                     seed=spec.seed, quantization=spec.quantization, dtype=spec.torch_dtype(), **spec.shape)
        handle = ckptlib.apply(work.model, config, work.spec)
        timings["build_s"] = time.perf_counter() - tic
        result = _measure(work, handle, device, warmup_steps, steps)
        result["weight_bytes"] = base_weight_bytes(work.model)
        timings["memory_step_s"] = result.pop("memory_step_s", 0.0)
        result["timings"] = timings
        return result

    return _with_status(cell, measure)


def predict_cell(cell: dict, device_model: str, card_bytes: int | None = None) -> dict:
    """The cell's predicted peak on `device_model` (ckptlib.predict); `oom` when it exceeds the card."""
    def prediction(spec, config, build):
        predicted = _predict(spec, config, build, device_model)
        fits = card_bytes is None or predicted.fits(card_bytes)
        return {
            "status": "ok" if fits else "oom", "reason": None if fits else _over_card(predicted, card_bytes),
            "peak_bytes": predicted.peak_bytes, "breakdown": predicted.breakdown,
            "host_offload_peak_bytes": predicted.host_offload_bytes, "report": predicted.report,
            "plan": predicted.report.get("plans"), "device_name": f"predicted: {device_model}",
            "timings": {"predict_s": predicted.seconds},
        }

    return _with_status(cell, prediction)


def _predict(spec, config, build, device_model: str):
    from ckptlib.predict import predict

    return predict(build, config, device_model, preset=spec.preset, training=spec.training, lora_rank=spec.lora_rank,
                   seed=spec.seed, quantization=spec.quantization, dtype=spec.torch_dtype(), **spec.shape)


def _over_card(prediction, card_bytes: int) -> str:
    from sweep.tables import GIB

    return (f"predicted peak {prediction.peak_bytes / GIB:.2f} GiB + {prediction.context_bytes / GIB:.2f} GiB context "
            f"exceeds the {card_bytes / GIB:.2f} GiB card")


def _with_status(cell: dict, run) -> dict:
    """`run(spec, config, build)` with every outcome mapped to a status."""
    import torch

    import ckptlib
    from sweep.cell import Cell, import_builder

    spec = Cell(**cell)
    try:
        config = spec.checkpoint_config()
    except ValueError as error:
        return {"status": "invalid", "reason": str(error)}
    try:
        return run(spec, config, import_builder(spec.builder))
    except ckptlib.UnsupportedModeError as error:
        return {"status": "unsupported", "reason": str(error)}
    except Exception as error:  # noqa: BLE001 - every failure becomes a status
        if isinstance(error, torch.OutOfMemoryError) or any(m in str(error) for m in _OOM_MESSAGES):
            reason = str(error).splitlines()[0][:500] if str(error) else type(error).__name__
            del error
            gc.collect()
            return {"status": "oom", "reason": reason}
        return _failure(error)


def _failure(error: BaseException) -> dict:
    tail = "".join(traceback.format_exception(error))[-TRACEBACK_CHARS:]
    return {"status": "failed", "reason": f"{type(error).__name__}: {error}"[:500], "traceback": tail}


def _tracked_step(work, device: str) -> dict:
    """Peak live tensor bytes of one step on a CPU device, everything already alive included."""
    from ckptlib.memory import step_peak

    tracker = step_peak(work, device)
    return {"peak_bytes": tracker.peak_bytes, "breakdown": dict(tracker.peak_by_category)}


def _measure(work, handle, device: str, warmup_steps: int, steps: int) -> dict:
    """Timed steps run bare. On CUDA the allocator's counters give the peaks; on CPU, where a live
    tensor tracker would slow every op, one extra untimed step is tracked for the peak."""
    import torch

    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    samples: list[tuple[float, bool]] = []
    losses = []
    memory = {}
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for i in range(warmup_steps + steps):
        if i == warmup_steps:
            sync()
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
        sync()
        tic = time.perf_counter()
        loss = work.step()
        sync()
        samples.append((time.perf_counter() - tic, i < warmup_steps))
        losses.append(float(loss))
        if i == 0 and cuda:
            memory["first_step_peak_bytes"] = torch.cuda.max_memory_allocated()
    if cuda:
        stats = torch.cuda.memory_stats()
        memory.update(peak_bytes=torch.cuda.max_memory_allocated(), peak_reserved_bytes=torch.cuda.max_memory_reserved(),
                      alloc_retries=stats.get("num_alloc_retries", 0))
    else:
        tic = time.perf_counter()
        memory.update(_tracked_step(work, device))
        memory["memory_step_s"] = time.perf_counter() - tic
    measured = np.array([s for s, warm in samples if not warm])
    q1, median, q3 = np.percentile(measured, [25, 50, 75]) if len(measured) else (float("nan"),) * 3
    report = handle.report
    return {
        "status": "ok", "reason": None,
        "sec_per_step": float(median), "mean_s": float(measured.mean()) if len(measured) else None,
        "iqr_s": float(q3 - q1), **memory,
        "host_offload_peak_bytes": report.pool.get("peak_held_bytes", 0),
        "samples": samples, "final_loss": losses[-1] if losses else None,
        "report": report.as_dict(), "plan": report.plans,
        "device_name": _device_name(device),
    }


def _device_name(device: str) -> str:
    import torch

    from sweep.environment import cpu_model

    return torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU: {cpu_model()}"
