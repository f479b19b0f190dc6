"""Activation checkpointing strategies for diffusion-transformer training.

    handle = ckptlib.apply(model, ckptlib.CheckpointConfig(backend="unsloth", interval=2), spec)
    ...train...
    print(handle.report)
    handle.remove()
"""
from .apply import (
    FIRST_ARG,
    BlockSpec,
    CallConvention,
    CheckpointHandle,
    Report,
    UnsupportedModeError,
    apply,
)
from .config import BACKENDS, CheckpointConfig
from .memory import LiveTensorTracker
from .plan import Plan, plan
from .pool import HostPool, PoolStats
from .workload import TRAINING_MODES, Workload

__all__ = [
    "BACKENDS", "FIRST_ARG", "BlockSpec", "CallConvention", "CheckpointConfig", "CheckpointHandle",
    "HostPool", "LiveTensorTracker", "Plan", "PoolStats", "Report", "TRAINING_MODES",
    "UnsupportedModeError", "Workload", "apply", "plan",
]
