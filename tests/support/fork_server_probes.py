"""Tasks run through the fork server on a fake CUDA host (tests/test_isolation.py): each prints one
REPORT line of JSON. `python -m tests.support.fork_server_probes TASK [ARG]`."""

from __future__ import annotations

import gc
import json
import sys

import torch

from sweep.run import isolation
from sweep.store.results import CellResult
from sweep.vocabulary import Status


def report_state() -> CellResult:
    """A child's first act: what the fork server asked of CUDA while preloading, and the state it forked in."""
    from sweep.run import cuda_guard
    from tests.support import fake_cuda

    report = {
        "server_calls": list(fake_cuda.installed.calls),
        "guard_answered": sorted({name for name, _ in cuda_guard.asked}),
        "guard_refused": cuda_guard.refused,
        "initialized": torch.cuda.is_initialized(),
        "bad_fork": torch.cuda._is_in_bad_fork(),
        "peft_preloaded": "peft" in sys.modules,
        "collects": gc.isenabled(),
        "frozen_objects": gc.get_freeze_count(),
    }
    report["child_sees_cuda"] = torch.cuda.is_available()
    return CellResult(Status.OK, report=report)


def state_at_fork(builder_module: str, training: str) -> dict:
    result = isolation.run_isolated(report_state, (), 300, builder_module, trainings=(training,))
    return {"status": result.status, "reason": result.reason, **(result.report or {})}


def family_cell() -> dict:
    from sweep.config.cell import Cell
    from sweep.run.scenarios import MeasureSettings, measure_cell

    cell = Cell("flux1", "ckptlib.families.builders.flux1", "tiny", "layer", "torch", dtype="bf16")
    result = isolation.run_isolated(
        measure_cell, (cell.as_dict(), MeasureSettings("cpu", 1, 2)), 300, "ckptlib.families.builders"
    )
    return {"status": result.status, "reason": result.reason, "sec_per_step": result.sec_per_step}


def needs_cuda() -> CellResult:
    left_behind = sorted(
        name
        for name in ("tests.support.loaded_before_failing", "tests.support.needs_cuda_at_import")
        if name in sys.modules
    )
    from tests.support import needs_cuda_at_import

    return CellResult(Status.OK, report={"left_behind": left_behind, "device_in_child": needs_cuda_at_import.DEVICE})


def after_failed_preload() -> dict:
    isolation.PRELOAD.insert(1, "tests.support.needs_cuda_at_import")
    first = isolation.run_isolated(needs_cuda, (), 300, "ckptlib.synthetic", trainings=("full",))
    second = isolation.run_isolated(needs_cuda, (), 300, "ckptlib.synthetic", trainings=("full",))
    return {"status": first.status, "reason": first.reason, **(first.report or {}), "second_cell": second.status}


if __name__ == "__main__":
    task, *args = sys.argv[1:]
    found = globals()[task](*args)
    print("REPORT", json.dumps({**found, "preload_failures": isolation.preload_failures}, default=str))
