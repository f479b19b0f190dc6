"""A test-only family whose presets fail in every way a cell can: for the sweep's fault injection."""

from __future__ import annotations

import ctypes
import os
import sys
import time

from ckptlib import UnsupportedModeError, synthetic
from ckptlib.synthetic import resolve_shape as _resolve_synthetic

PRESETS = ("ok", "ok-wide", "oom", "segfault", "hang", "raise", "unsupported", "slow", "exit", "sys-exit")


def resolve_shape(preset: str, **overrides):
    return _resolve_synthetic("tiny", **overrides)


class FaultyStep:
    def __init__(self, fault: str):
        self.fault = fault

    def __call__(self):
        if self.fault == "oom":
            import torch  # this module imports none: a sweep's own process never does (sweep/run/app.py)

            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (injected)")
        if self.fault == "segfault":
            ctypes.string_at(0)
        if self.fault == "hang":
            time.sleep(3600)
        if self.fault == "raise":
            raise RuntimeError("injected failure in a measured step")
        if self.fault == "exit":
            os._exit(3)
        if self.fault == "sys-exit":
            sys.exit("the model's weights are missing (injected)")
        if self.fault == "slow":
            time.sleep(0.3)


def build(
    preset: str,
    training: str = "lora",
    device: str = "cpu",
    lora_rank: int = 4,
    seed: int = 0,
    quantization: str = "none",
    **shape,
):
    if preset not in PRESETS:
        raise ValueError(f"unknown faulty preset {preset!r}")
    if preset == "unsupported":
        raise UnsupportedModeError("faulty: this preset declares no capability at all (injected)")
    width = {"ok-wide": 128}.get(preset)
    work = synthetic.build(
        "tiny",
        training=training,
        device=device,
        lora_rank=lora_rank,
        seed=seed,
        quantization=quantization,
        **({"width": width} if width else {}),
        **shape,
    )
    fault, step = FaultyStep(preset), work.step

    def faulty_step():
        fault()
        return step()

    work.step = faulty_step
    return work


def hang_saying_so(progress):
    """A cell's task that reports a phase, then hangs: an interrupt raised where the parent hears the
    phase lands mid-cell, with the child surely past installing its stack dump."""
    progress("hanging")
    time.sleep(3600)
