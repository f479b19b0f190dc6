"""Keeps CUDA uninitialised in the fork server, whatever the preloaded packages import.

NOTE [ CUDA and the fork server ]: a process that has initialised CUDA cannot hand a working CUDA
to a forked child ("Cannot re-initialize CUDA in forked subprocess"), and even
`torch.cuda.is_available()` starts the driver (cudaGetDeviceCount). Preloaded packages do ask:
transformers imports torchao, whose import calls `is_available()` and `get_device_capability()`,
and, where Triton is installed (every CUDA image), torch's `has_triton()`, which reads the current
device's properties. So the fork server imports its preload under this guard (`sweep.run.forkserver`
installs it first): device queries, `has_triton()` among them, are answered from NVML, which
starts nothing; anything else that would start CUDA raises ImportError, and the fork server
leaves what failed to the child (NOTE [ The fork server owns its preload ] in
sweep/run/forkserver.py). Each child lifts the guard before its cell runs, then checks that CUDA is
still untouched (`sweep.run.isolation.child_main`). A module imported under the guard keeps the answer
it was given (torchao binds `has_triton` at import): each answer is the one CUDA would give.
"""

from __future__ import annotations

import sys

_originals: dict[tuple[object, str], object] = {}
asked: list[tuple[str, str]] = []  # (query, module that asked), answered from NVML
refused: list[tuple[str, str]] = []  # (function, module that asked), refused


def _caller() -> str:
    frame = sys._getframe(2)
    return frame.f_globals.get("__name__", "?")


def _visible():
    from sweep.machine import gpus

    try:
        return gpus.visible_gpus()
    except gpus.NvmlUnavailable:
        return []


def install() -> None:
    """Replace torch.cuda's device queries with NVML answers and refuse CUDA initialisation."""
    import torch

    if _originals:
        return
    visible = _visible()

    def gpu(device=None):
        index = device.index if isinstance(device, torch.device) else device
        index = int(str(index).rpartition(":")[2] or 0) if isinstance(index, str) else (index or 0)
        if index >= len(visible):
            refuse("a query about a GPU NVML does not see")
        return visible[index]

    def answer(name, function):
        def query(*args, **kwargs):
            asked.append((name, _caller()))
            return function(*args, **kwargs)

        return query

    def refuse(name):
        refused.append((name, _caller()))
        raise ImportError(
            f"torch.cuda.{name} would initialise CUDA in the fork server (see sweep/run/cuda_guard.py); "
            "the child imports this module itself"
        )

    replacements = {
        (torch.cuda, "is_available"): answer("is_available", lambda: bool(visible)),
        (torch.cuda, "device_count"): answer("device_count", lambda: len(visible)),
        (torch.cuda, "get_device_capability"): answer("get_device_capability", lambda d=None: gpu(d).capability),
        (torch.cuda, "get_device_name"): answer("get_device_name", lambda d=None: gpu(d).name),
        (torch.cuda, "_lazy_init"): lambda *_, **__: refuse("_lazy_init"),
        (torch.cuda, "init"): lambda *_, **__: refuse("init"),
    }
    import torch.utils._triton as triton_checks

    replacements[(triton_checks, "has_triton")] = answer("has_triton", lambda: _has_triton(visible))
    if hasattr(torch._C, "_cuda_getDeviceCount"):  # CUDA builds only
        replacements[(torch._C, "_cuda_getDeviceCount")] = answer("_cuda_getDeviceCount", lambda: len(visible))
    for (owner, name), replacement in replacements.items():
        _originals[(owner, name)] = getattr(owner, name)
        setattr(owner, name, replacement)


def _has_triton(visible) -> bool:
    """torch.utils._triton.has_triton, with the CUDA device's capability read from NVML."""
    from torch.utils._triton import has_triton_package

    if not has_triton_package():
        return False
    if any(gpu.capability and gpu.capability[0] >= 7 for gpu in visible):
        return True
    import triton.backends

    return "cpu" in triton.backends.backends


def lift() -> None:
    """Give torch.cuda back its own functions (in a child, before its cell runs)."""
    for (owner, name), original in _originals.items():
        setattr(owner, name, original)
    _originals.clear()


def check_untouched() -> None:
    """RuntimeError when CUDA was initialised before this child forked."""
    import torch

    if torch.cuda.is_initialized() or torch.cuda._is_in_bad_fork():
        raise RuntimeError(
            "CUDA was initialised in the fork server before this cell's process forked; a CUDA cell "
            "cannot run in it (see NOTE [ CUDA and the fork server ] in sweep/run/cuda_guard.py)"
        )
