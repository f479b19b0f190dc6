"""Where a run happened: hardware label and software environment."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ckptlib.units import GIB

from . import gpus

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torch", "diffusers", "peft", "transformers", "torchao", "sdnq", "ckpt-sweep")


def cuda_usable() -> bool:
    """GPUs are visible (NVML) and torch was built with CUDA; CUDA itself is left uninitialised.
    NVML first: a host without GPUs is told so without importing torch (NOTE [ A sweep's own
    process imports no torch ] in sweep/run/app.py)."""
    if gpus.count() == 0:
        return False
    import torch

    return torch.backends.cuda.is_built()


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    return "cuda" if cuda_usable() else "cpu"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_info(device: str) -> dict:
    """NVML's view of the GPU `device` names (CUDA left uninitialised); empty where NVML cannot tell."""
    try:
        return gpus.gpu_for(device).as_dict()
    except (gpus.NvmlUnavailable, LookupError):
        return {}


# What SLURM tells a task about itself: its job, node and partition, and the GPUs it was given.
SLURM_IDENTITY = (
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURMD_NODENAME",
    "SLURM_JOB_PARTITION",
    "SLURM_STEP_GPUS",
    "SLURM_GPUS_ON_NODE",
)


def worker_identity(device: str) -> dict:
    """Which process, host and GPU ran a cell: cells of one run may land on many GPUs and nodes."""
    identity = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "niceness": os.nice(0),  # a cell measured at a lowered priority lost the CPU to its neighbours
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    gpu = gpu_info(device)
    identity.update({f"gpu_{k}": gpu[k] for k in ("name", "uuid") if k in gpu})
    for variable in SLURM_IDENTITY:
        if variable in os.environ:
            identity[variable.lower()] = os.environ[variable]
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        identity["ray_worker_id"] = ray.get_runtime_context().get_worker_id()
    return identity


def hardware_label(device: str) -> str:
    """The row label reports use: the GPU's name, or 'CPU: <model>' so CPU figures never pass for GPU ones."""
    if device.startswith("cuda"):
        try:
            return gpus.gpu_for(device).label
        except (gpus.NvmlUnavailable, LookupError):
            return "CUDA GPU"
    return f"CPU: {cpu_model()}"


def prediction_label(device_model: str, card_bytes: int | None) -> str:
    card = f", {card_bytes / GIB:g} GiB card" if card_bytes else ""
    return f"predicted: {device_model}{card}"


def git_state() -> dict:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5
        ).stdout.strip()

    try:
        return {
            "git_commit": git("rev-parse", "HEAD") or None,
            "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        }
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}


def versions() -> dict:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


@functools.cache
def code_versions() -> dict:
    """What measured a cell: this project's commit and the package versions (per process: a long
    sweep's workers keep the code they started with)."""
    return {**git_state(), "packages": versions()}


TORCH_FACTS = ("cuda", "cudnn", "torch_threads")  # what a run records of torch (None: no child could tell)


def torch_facts() -> dict:
    """torch's CUDA and cuDNN versions and its CPU threads. Imports torch: a sweep asks a child of
    its fork server (NOTE [ A sweep's own process imports no torch ] in sweep/run/app.py)."""
    import torch

    return {
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "torch_threads": torch.get_num_threads(),
    }


def capture(device: str, torch_facts: dict | None = None) -> dict:
    """Everything recorded with a run, with `torch_facts()` as a child told them. Does not
    initialise CUDA (NVML only)."""
    env = {
        "hardware": hardware_label(device),
        "device": device,
        "cpu": cpu_model(),
        "gpu": gpu_info(device) if device.startswith("cuda") else {},
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "versions": versions(),
        **{fact: (torch_facts or {}).get(fact) for fact in TORCH_FACTS},
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    }
    env.update(git_state())
    return env


def capture_prediction(device_model: str, card_bytes: int | None) -> dict:
    """What a predicted run records: the device model and its assumptions, the card, the software."""
    from ckptlib.devices import DEVICE_MODELS

    return {
        "hardware": prediction_label(device_model, card_bytes),
        "device": f"predicted:{device_model}",
        "card_bytes": card_bytes,
        "assumptions": DEVICE_MODELS[device_model].assumptions(),
        "cpu": cpu_model(),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "versions": versions(),
        **git_state(),
    }
