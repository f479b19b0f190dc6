"""Activation checkpointing strategies for diffusion-transformer training.

handle = ckptlib.apply(model, ckptlib.CheckpointConfig(backend="unsloth", interval=2), spec)
...train...
print(handle.report)
handle.remove()
"""

from .apply import CheckpointHandle, Report, apply, find_submodules, spec_problems
from .config import BACKENDS, Backend, CheckpointConfig
from .memory import LiveTensorTracker
from .modes import MODES
from .plan import BlockPlan, plan_blocks, plan_lists
from .pool import HostPool, PoolStats, available_host_bytes
from .spec import FIRST_ARG, BlockSpec, CallConvention, SpecError, UnsupportedModeError
from .workload import TRAINING_MODES, Workload

__all__ = [
    "BACKENDS",
    "FIRST_ARG",
    "MODES",
    "Backend",
    "BlockSpec",
    "CallConvention",
    "CheckpointConfig",
    "CheckpointHandle",
    "HostPool",
    "available_host_bytes",
    "LiveTensorTracker",
    "BlockPlan",
    "PoolStats",
    "Report",
    "TRAINING_MODES",
    "SpecError",
    "UnsupportedModeError",
    "Workload",
    "apply",
    "find_submodules",
    "spec_problems",
    "plan_blocks",
    "plan_lists",
]
