"""The fork server and its children on a (fake) CUDA host: the server preloads without starting
CUDA, with Triton installed as on every CUDA image, survives a preload that fails, and hands its
children an uninitialised CUDA; exit reasons, and where a dead child was (sweep/run/stacks.py)."""

import json
import multiprocessing
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import torch

from sweep.run import cuda_guard
from sweep.run.isolation import exit_reason
from sweep.run.stacks import innermost_frame
from tests.support.sweeps import ROOT, SUPPORT

PROBES = "tests.support.fork_server_probes"


def probe(task: str, *args: str) -> dict:
    """`task` of tests/support/fork_server_probes.py in a process on a fake CUDA host (one H100)."""
    env = {"CKPT_SWEEP_FAKE_CUDA": "h100", "PYTHONPATH": f"{ROOT}:{SUPPORT / 'fake_cuda_host'}"}
    done = subprocess.run(
        [sys.executable, "-m", PROBES, task, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={**__import__("os").environ, **env},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("REPORT "))


def triton_installed() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.long
@pytest.mark.parametrize(
    "builder_module, training",
    [("ckptlib.synthetic", "full"), ("ckptlib.synthetic", "lora"), ("ckptlib.families.builders", "lora")],
)
def test_the_fork_server_preloads_without_reaching_cudas_entry_points(builder_module, training):
    """torchao's import (through peft and diffusers) asks about the device, and with Triton installed
    runs torch's has_triton(): the guard answers from NVML, so no torch._C._cuda_* entry point is
    reached before the fork, nothing fails to preload, and the child starts with CUDA untouched.
    PEFT is preloaded for cells that train LoRA only (seconds of CPU that full training never uses;
    diffusers' classes import it themselves, so the families have it either way)."""
    report = probe("state_at_fork", builder_module, training)
    assert report["status"] == "ok", report
    assert report["peft_preloaded"] is (training == "lora")
    assert report["server_calls"] == [] and report["preload_failures"] == {}
    asked_through_peft = {"is_available", "get_device_capability"} | ({"has_triton"} if triton_installed() else set())
    assert set(report["guard_answered"]) >= (asked_through_peft if training == "lora" else set())
    assert report["guard_refused"] == []
    assert report["initialized"] is False and report["bad_fork"] is False
    assert report["child_sees_cuda"] is True  # torch's own check, through the C entry point, after the lift
    # NOTE [ Imports without the collector ]: the server preloaded with the collector paused and froze
    # what it imported (torch alone is some 10^5 objects); the cell collects its own garbage again
    assert report["collects"] is True and report["frozen_objects"] > 100_000


@pytest.mark.long
@pytest.mark.skipif(not triton_installed(), reason="needs Triton (pip install triton; CI installs it)")
def test_a_family_cell_measures_ok_through_the_fork_server_on_a_cuda_host_with_triton():
    """Before the guard answered has_triton, the fork server died during preload on such a host and
    every family cell ended in 'EOFError: unexpected EOF'."""
    report = probe("family_cell")
    assert report["status"] == "ok", report
    assert report["preload_failures"] == {} and report["sec_per_step"] > 0


@pytest.mark.long
def test_a_preload_that_fails_restarts_the_server_without_it():
    """A module that turns the guard's refusal into a RuntimeError (as diffusers' lazy modules do):
    the server survives, starts again without it, and says so; the child imports it itself."""
    report = probe("after_failed_preload")
    assert report["status"] == "ok", report
    assert list(report["preload_failures"]) == ["tests.support.needs_cuda_at_import"]
    assert "RuntimeError" in report["preload_failures"]["tests.support.needs_cuda_at_import"]
    assert report["left_behind"] == []  # nothing the failed import loaded is in the child
    assert report["device_in_child"] == 0 and report["second_cell"] == "ok"


def test_a_fork_server_whose_starter_has_ended_exits_before_its_preload():
    """A sweep with nothing to run ends within a second, maybe before its fork server asked to die
    with it: the server then exits at once, instead of importing torch for nobody while it holds the
    sweep's output open (a pipe's reader waited 2 s for it). With its starter alive, it preloads."""
    import os

    from sweep.run.isolation import PRELOAD_VARIABLE, STARTER_VARIABLE

    script = "import sweep.run.forkserver\nprint('preloaded')"
    env = {**os.environ, PRELOAD_VARIABLE: "", STARTER_VARIABLE: "1"}  # pid 1 started no test's process
    gone = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert gone.returncode == 0 and "preloaded" not in gone.stdout, gone.stderr
    env[STARTER_VARIABLE] = str(os.getpid())
    alive = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert alive.returncode == 0 and "preloaded" in alive.stdout, alive.stderr


def test_a_child_refuses_to_run_after_cuda_was_initialised(fake_cuda):
    cuda_guard.check_untouched()
    torch.cuda.init()  # torch's own lazy initialisation, over the fake C entry points
    with pytest.raises(RuntimeError, match="CUDA was initialised in the fork server"):
        cuda_guard.check_untouched()


def test_a_child_of_a_bad_fork_refuses_to_run(fake_cuda):
    fake_cuda.bad_fork = True
    with pytest.raises(RuntimeError, match="CUDA was initialised in the fork server"):
        cuda_guard.check_untouched()


def test_guarded_initialisation_is_an_import_error_and_lifting_restores_torch(fake_cuda, monkeypatch):
    from tests.support import fake_nvml
    from tests.support.fake_cuda import H100

    fake_nvml.install([fake_nvml.from_fake_gpu(H100)], monkeypatch)
    original = torch.cuda._lazy_init
    cuda_guard.install()
    try:
        with pytest.raises(ImportError, match="would initialise CUDA in the fork server"):
            torch.cuda.current_device()
        assert torch.cuda.is_available() is True  # from NVML
        assert fake_cuda.calls == []
    finally:
        cuda_guard.lift()
    assert torch.cuda._lazy_init is original
    assert torch.cuda.current_device() == 0 and ("_cuda_init",) in fake_cuda.calls


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


STDLIB = sysconfig.get_paths()["stdlib"]
# faulthandler's dumps: a fatal signal's (the faulting thread only), and SIGTERM's (every thread)
FATAL = f"""Fatal Python error: Segmentation fault

Stack (most recent call first):
  File "{STDLIB}/ctypes/__init__.py", line 519 in string_at
  File "/work/tests/support/faulty.py", line 29 in __call__
  File "/work/sweep/run/isolation.py", line 329 in child_main

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)"""
TERMINATED = f"""Thread 0x00007f126ad526c0 (most recent call first):
  File "{STDLIB}/threading.py", line 327 in wait
  File "/venv/lib/python3.11/site-packages/torch/utils/data/loader.py", line 12 in _worker

Current thread 0x00007f126ba47b80 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/cuda/streams.py", line 88 in synchronize
  File "/work/ckptlib/offload.py", line 140 in reload"""
NOT_IN_PYTHON = """Thread 0x00007f126ad526c0 (most recent call first):
  File "/work/a.py", line 1 in helper

Thread 0x00007f126ba47b80 (most recent call first):
  File "/work/tests/support/faulty.py", line 31 in __call__

Current thread 0x00007f1200000000 (most recent call first):
  <no Python frame>"""


@pytest.mark.parametrize(
    "dump, where",
    [
        (FATAL, "support/faulty.py line 29 (__call__)"),  # Python's own library: its caller says more
        (TERMINATED, "cuda/streams.py line 88 (synchronize)"),  # an installed package is no standard library
        (NOT_IN_PYTHON, "support/faulty.py line 31 (__call__)"),  # the main thread, listed last
        ("Fatal Python error: Aborted\n\nStack (most recent call first):\n  <no Python frame>", None),
    ],
)
def test_a_dead_childs_innermost_frame(dump, where):
    assert innermost_frame(dump) == where


def test_imports_pause_the_collector_and_leave_it_as_it_was():
    """NOTE [ Imports without the collector ]: paused inside, as it was after (on or off), nested too."""
    import gc

    from sweep.run.heap import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_sweep_training_both_ways_starts_its_fork_server_with_peft(tmp_path, monkeypatch):
    """The server's preload is for every cell of the sweep, not only the first: here the first
    trains in full, a later one LoRA, whose cells would otherwise import PEFT each (3 to 5 s)."""
    from sweep.run import isolation
    from tests.support.sweeps import run_sweep

    started = []
    monkeypatch.setattr(isolation, "start_fork_server", lambda module, trainings: started.append((module, trainings)))
    overrides = ["sweep=none", "family=synthetic", "preset=tiny", "mode=none", "training=full,lora"]
    done = run_sweep(tmp_path / "r.db", *overrides, "measure.warmup_steps=0", "measure.steps=1")
    assert done.returncode == 0, done.stderr[-2000:]
    ((module, trainings),) = started
    assert set(trainings) == {"full", "lora"}
    assert "peft" in isolation.preload_modules(module, trainings)
    assert "peft" not in isolation.preload_modules(module, {"full"})


def test_an_interrupt_mid_cell_stops_the_child_and_the_sweeps_last_line_says_where_it_was(monkeypatch):
    """Ctrl-C or SIGTERM while a cell runs (here raised where the parent hears the cell's phase): the
    child is stopped as a timed-out one is, its stack says where it was, and so does the line the
    sweep ends with (NOTE [ Where a cell died ] in sweep/run/stacks.py), once."""
    from sweep.run import isolation, progress
    from tests.support import faulty

    def raising(error):
        def on_phase(phase):
            assert phase == "hanging"
            [child] = multiprocessing.active_children()
            wchan, deadline = Path(f"/proc/{child.pid}/wchan"), time.monotonic() + 120  # a hang detector
            while "nanosleep" not in wchan.read_text():  # past sending the phase: in time.sleep
                assert time.monotonic() < deadline, wchan.read_text()
                time.sleep(0.01)
            raise error

        return on_phase

    with pytest.raises(RuntimeError):  # the harness's own error, not an interrupt: no place is kept
        isolation.run_isolated(faulty.hang_saying_so, (), 300, "ckptlib.synthetic", raising(RuntimeError()), ("full",))
    assert isolation.interrupted_in() is None and multiprocessing.active_children() == []
    with pytest.raises(KeyboardInterrupt):
        isolation.run_isolated(
            faulty.hang_saying_so, (), 300, "ckptlib.synthetic", raising(KeyboardInterrupt), ("full",)
        )
    sleep = 1 + (SUPPORT / "faulty.py").read_text().splitlines().index("    time.sleep(3600)")
    sweep = progress.SweepCallback()
    sweep.total, sweep.counts["ok"], sweep.cell = 3, 1, "faulty/hang none q=none full"
    monkeypatch.setattr(progress, "active", sweep)
    assert progress.interrupted() == (
        "interrupted after 1 of 3 cells; faulty/hang none q=none full was running, "
        f"in support/faulty.py line {sleep} (hang_saying_so); run the same command again to resume"
    )
    assert progress.interrupted() == "interrupted after 1 of 3 cells; run the same command again to resume"
