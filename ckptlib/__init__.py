"""Activation checkpointing strategies for diffusion-transformer training.

handle = ckptlib.apply(model, ckptlib.CheckpointConfig(backend="unsloth", interval=2), spec)
...train...
print(handle.report)
handle.remove()

Names are imported on first use (PEP 562): `ckptlib.units`, `ckptlib.modes` and the configs do not
import torch, so a verb that only reads results (advise, runs, diff) never pays for it.
"""

from __future__ import annotations

import importlib

# name -> the submodule that defines it
_EXPORTS = {
    "CheckpointHandle": "wiring",
    "Report": "wiring",
    "apply": "wiring",
    "find_submodules": "wiring",
    "spec_problems": "wiring",
    "BACKENDS": "config",
    "Backend": "config",
    "CheckpointConfig": "config",
    "FFN_SCOPES": "config",
    "COMPILE_MODES": "compile",
    "Compiler": "compile",
    "LiveTensorTracker": "memory",
    "MODES": "modes",
    "BlockPlan": "plan",
    "plan_blocks": "plan",
    "plan_lists": "plan",
    "HostPool": "pool",
    "PoolStats": "pool",
    "available_host_bytes": "host",
    "FIRST_ARG": "spec",
    "BlockSpec": "spec",
    "CallConvention": "spec",
    "FeedForwardSide": "spec",
    "SpecError": "spec",
    "UnsupportedModeError": "spec",
    "TRAINING_MODES": "names",
    "Workload": "workload",
    "adapters_not_injected": "workload",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ckptlib' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
