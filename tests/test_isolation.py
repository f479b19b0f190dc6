"""The fork server and its children: fork safety on a (simulated) CUDA host, exit reasons."""

import json
import subprocess
import sys

import pytest
import torch

from sweep import cuda_guard
from sweep.isolation import exit_reason, preload_modules
from tests.sweep_helpers import ROOT

PROBE = """
import json, sys
from sweep import isolation
from tests.support.simulated_cuda_host import report_preload

isolation.PRELOAD.insert(0, "tests.support.simulated_cuda_host")  # before the guard: it stands for the host
result = isolation.run_isolated(report_preload, (), 120, sys.argv[1])
print("REPORT", json.dumps({"status": result.status, "reason": result.reason, **(result.report or {})}))
"""


def probe(builder_module: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, builder_module], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("REPORT "))


@pytest.mark.parametrize("builder_module", ["ckptlib.synthetic", "ckptlib.families.builders"])
def test_the_fork_server_preloads_without_asking_cuda_anything(builder_module):
    """On a host that looks like it has a GPU, torchao's import (through peft and diffusers) asks
    torch.cuda about the device: the guard answers from NVML, so none of torch.cuda's own entry
    points (which would start CUDA before the fork) is reached."""
    report = probe(builder_module)
    assert report["status"] == "ok", report
    assert report["calls_during_preload"] == []
    assert {"is_available", "get_device_capability"} <= set(report["guard_answered"])  # the imports did ask
    assert report["guard_refused"] == []
    assert report["initialized"] is False and report["bad_fork"] is False
    assert report["is_available_after_lift"] is True and report["calls_after_lift"] == ["is_available"]


def test_the_guard_goes_first_in_every_preload():
    for module in ("ckptlib.synthetic", "ckptlib.families.builders", "mypkg.model"):
        assert preload_modules(module)[0] == "sweep.forkserver"


def test_a_child_refuses_to_run_after_cuda_was_initialised(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="CUDA was initialised in the fork server"):
        cuda_guard.check_untouched()


def test_guarded_initialisation_is_an_import_error_and_lifting_restores_torch():
    original = torch.cuda._lazy_init
    cuda_guard.install()
    try:
        with pytest.raises(ImportError, match="would initialise CUDA in the fork server"):
            torch.cuda.current_device()
        assert torch.cuda.is_available() is False  # NVML sees no GPU here
    finally:
        cuda_guard.lift()
    assert torch.cuda._lazy_init is original


@pytest.mark.parametrize(
    "code, reason",
    [
        (-9, "child died by SIGKILL (likely the host OOM killer) before reporting"),
        (-11, "child died by SIGSEGV before reporting"),
        (3, "child exited with code 3 before reporting"),
    ],
)
def test_exit_reasons(code, reason):
    assert exit_reason(code) == reason
