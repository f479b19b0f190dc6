"""The GPU acceptance script, run whole on this CPU so it cannot rot between GPU sessions: on a fake
CUDA host (torch's own torch.cuda over fake C entry points, tests/support/fake_cuda.py) with
`--device cuda` at tiny scale, in its two invocations; on the CPU itself for the checks that
differ there. What the fake host cannot be (pinned memory, CUDA generators, a card that runs out)
fails the checks that need it, after every step before the kernels ran, and those failures are
asserted as such."""

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from sweep.acceptance import CHECKS, run_in_group, stopped_reason
from tests.support.sweeps import ROOT, SUPPORT

FAKE_CUDA = {
    "CKPT_SWEEP_FAKE_CUDA": "h100+kernels-on-cpu",
    "PYTHONPATH": f"{ROOT}{os.pathsep}{SUPPORT / 'fake_cuda_host'}",
}
# check -> (status, the start of its first line) on the fake H100 with CPU kernels
CORE_ON_FAKE_CUDA = {
    "fork_server": ("ok", "child started with CUDA initialised=False, bad fork=False; allocated on cuda: True"),
    "offload": ("failed", "unsloth: nothing was pinned"),  # pinned host memory is CUDA's allocator's
    "harness": ("ok", "3 cells measured through ckpt-sweep run into results.db"),
    "oom": ("failed", "statuses [(67108864, 'host-oom'), (1, 'ok')]"),  # CPU kernels exhaust the host, not the card
    "quantization": ("failed", "fp8-torchao none: unsupported (fp8-torchao needs a CUDA GPU; this cell runs on cpu)"),
    "families": ("failed", "flux1 none: RuntimeError: Cannot get CUDA generator without ATen_cuda library"),
    "environment": ("ok", "label 'H100 80GB HBM3'; memory: torch 79.18 GiB (what CUDA can allocate), NVML 79.65 GiB"),
}
# Inductor compiles for the GPU it is told of, and Triton needs the driver's library for that
STUDIES_ON_FAKE_CUDA = (
    "compile layer, compile regional: failed: InductorError: AssertionError: libcuda.so cannot found!"
)
MEASURED_CELLS = {"acceptance-harness": 3, "acceptance-oom": 2, "acceptance-quantization": 8}
STUDY_CELLS = {"acceptance-compile": 2, "acceptance-attention": 2, "acceptance-batch": 2}


def run_script(out, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/gpu_acceptance.py", "--out", str(out), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1500,  # a hang detector: each check has its own timeout
        env={**os.environ, **(env or {})},
    )


def outcomes(out) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in (out / "checks").glob("*.json")}


def measured_runs(out) -> dict:
    with sqlite3.connect(out / "results.db") as db:
        return dict(
            db.execute(
                "select r.name, count(*) from cells c join runs r on r.id = c.run_id "
                "where r.provenance = 'measured' group by r.name"
            )
        )


def summary_rows(out) -> dict:
    """The summary's first table: check -> status."""
    lines = (out / "summary.md").read_text().splitlines()
    start = lines.index("| check | status | seconds | first line |") + 2
    rows = [line.split(" | ") for line in lines[start:] if line.startswith("| ")][: len(CHECKS)]
    return {row[0].removeprefix("| "): row[1] for row in rows}


CORE_STATUSES = {n: s for n, (s, _) in CORE_ON_FAKE_CUDA.items()}


@pytest.mark.long
def test_the_core_invocation_runs_whole_on_a_fake_cuda_host_and_resumes(tmp_path):
    out = tmp_path / "acceptance"
    core = run_script(out, "--device", "cuda", "--scale", "tiny", "--families", "flux1,heartmula", env=FAKE_CUDA)
    assert core.returncode == 1, core.stdout + core.stderr[-3000:]  # the checks the fake host cannot pass
    found = outcomes(out)
    assert {name: o["status"] for name, o in found.items()} == CORE_STATUSES
    for name, (_, first_line) in CORE_ON_FAKE_CUDA.items():
        assert found[name]["details"][0].startswith(first_line), (name, found[name]["details"])
    assert summary_rows(out) == {**CORE_STATUSES, "studies": "not run yet"}
    assert measured_runs(out) == MEASURED_CELLS
    with sqlite3.connect(out / "results.db") as db:
        assert {row[0] for row in db.execute("select hardware from runs")} == {"H100 80GB HBM3", "predicted: cuda"}
    assert "$ ckpt-sweep run" in (out / "logs" / "harness.log").read_text()  # the sweep's own output, streamed

    again = run_script(out, "--device", "cuda", "--scale", "tiny", "--only", "fork_server,environment", env=FAKE_CUDA)
    assert again.returncode == 0 and again.stdout.count("earlier (--rerun runs it again)") == 2, again.stdout


@pytest.mark.long
def test_the_studies_invocation_adds_its_check_to_what_an_earlier_one_recorded(tmp_path):
    """The second invocation of a GPU session (here first, so the two run side by side in the suite;
    the order does not matter to the summary: a folder keeps every check's latest outcome)."""
    out = tmp_path / "acceptance"
    studies = run_script(out, "--device", "cuda", "--scale", "tiny", "--part", "studies", env=FAKE_CUDA)
    assert studies.returncode == 1, studies.stdout + studies.stderr[-3000:]
    found = outcomes(out)["studies"]
    assert found["status"] == "failed" and found["details"][0] == STUDIES_ON_FAKE_CUDA, found
    assert measured_runs(out) == STUDY_CELLS
    core = run_script(out, "--device", "cuda", "--scale", "tiny", "--only", "environment", env=FAKE_CUDA)
    assert core.returncode == 0, core.stdout + core.stderr[-3000:]
    rows = summary_rows(out)
    assert (rows["studies"], rows["environment"]) == ("failed", "ok")
    assert {rows[name] for name in CORE_STATUSES if name != "environment"} == {"not run yet"}


@pytest.mark.long
def test_on_a_cpu_the_cuda_checks_are_skipped_and_the_host_runs_out(tmp_path):
    out = tmp_path / "acceptance"
    done = run_script(out, "--device", "cpu", "--only", "fork_server,oom,environment")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    found = outcomes(out)
    assert {name: o["status"] for name, o in found.items()} == {
        "fork_server": "ok",
        "oom": "ok",
        "environment": "skipped",
    }
    assert found["environment"]["details"] == ["the hardware label and UUID checks need a CUDA device"]
    assert found["oom"]["details"][0].startswith("batch 67108864: host-oom")
    assert summary_rows(out)["harness"] == "not run yet"


def test_an_invocation_starts_no_check_past_its_budget(tmp_path):
    out = tmp_path / "acceptance"
    done = run_script(out, "--device", "cpu", "--budget-s", "0")
    assert done.returncode == 0 and "run the same command to resume" in done.stdout, done.stdout
    assert outcomes(out) == {} and set(summary_rows(out).values()) == {"not run yet"}
    assert list(summary_rows(out)) == list(CHECKS)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


def assert_ended(pid: int) -> None:
    for _ in range(100):  # the kill is sent; the process table may lag a moment
        if not alive(pid):
            break
        time.sleep(0.1)
    assert not alive(pid)


def test_a_check_and_everything_it_started_end_together_when_it_exits(tmp_path):
    """A check's sweep, fork server and cells are its process group: anything left behind when it
    exits is killed."""
    pidfile, log = tmp_path / "grandchild.pid", tmp_path / "check.log"
    assert run_in_group(["sh", "-c", f"sleep 1000 & echo $! > {pidfile}; exit 0"], log, timeout_s=600) == 0
    assert_ended(int(pidfile.read_text()))


def test_a_check_past_its_timeout_is_stopped_with_all_it_started_and_its_log_says_where_it_was(tmp_path):
    """At its time limit a check's group is stopped, and the check's process writes its stack into its
    log first (NOTE [ Where a cell died ] in sweep/run/stacks.py), from which the summary's reason
    says where it was (not from an earlier invocation's stack in the same log): run here by the
    script's own entry, as `--check`, with a check that starts a process and hangs."""
    pidfile, log, out = tmp_path / "grandchild.pid", tmp_path / "check.log", tmp_path / "out"
    hanging = f"""import subprocess, sys, time
import sweep.acceptance as acceptance
def hang(target, out):
    open({str(pidfile)!r}, "w").write(str(subprocess.Popen(["sleep", "1000"]).pid))
    time.sleep(1000)
acceptance.CHECKS["hang"] = acceptance.Check(hang, 600)
sys.exit(acceptance.main(["--check", "hang", "--device", "cpu", "--out", {str(out)!r}]))
"""
    # 20 s: the check process starts, imports sweep.acceptance and starts its child in about a second
    log.write_text('Current thread 0x1 (most recent call first):\n  File "earlier.py", line 9 in stuck\n')
    since = log.stat().st_size
    assert run_in_group([sys.executable, "-c", hanging], log, timeout_s=20) is None
    assert_ended(int(pidfile.read_text()))
    text = log.read_text()
    assert "(most recent call first):" in text and 'File "<string>", line 5 in hang' in text, text
    assert stopped_reason(log, since, 20) == (
        "no result within 20 s (its group was stopped), while in <string> line 5 (hang); its stack ends logs/check.log"
    )
    with log.open("a") as stream:
        stream.write("\n")
    assert stopped_reason(log, log.stat().st_size, 20) == (
        "no result within 20 s (its group was stopped); where it was ends logs/check.log"
    )


def test_the_fake_host_fakes_cuda_when_torch_is_imported_and_leaves_other_processes_alone():
    """A process on the fake host that never imports torch (multiprocessing's resource tracker, the
    script's driver) is not made to import it; one that does sees the card from its first line on."""
    probe = "import sys; print('torch' in sys.modules); import torch; print(torch.cuda.device_count())"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={**os.environ, **FAKE_CUDA}
    )
    assert done.stdout.split() == ["False", "1"], done.stdout + done.stderr[-2000:]


def gpu_session(tmp_path, *args: str, card: str = "NVIDIA H200, 143771 MiB, 570.86.15") -> subprocess.CompletedProcess:
    """scripts/gpu_session.sh on this host, with this venv's python3 and an `nvidia-smi` that names
    the card (none: it finds no GPU) and leaves a mark when it is run."""
    bin = tmp_path / "bin"
    bin.mkdir(exist_ok=True)
    smi = bin / "nvidia-smi"
    found = f'echo "{card}"' if card else 'echo "NVIDIA-SMI has failed" && exit 9'
    smi.write_text(f"#!/bin/sh\ntouch {tmp_path}/nvidia-smi-ran\n{found}\n")
    smi.chmod(0o755)
    path = os.pathsep.join([str(bin), os.path.dirname(sys.executable), os.environ["PATH"]])
    return subprocess.run(
        ["scripts/gpu_session.sh", *args], capture_output=True, text=True, cwd=ROOT, timeout=600,
        env={**os.environ, "PATH": path},
    )  # fmt: skip


@pytest.mark.parametrize(
    "budget, stages, refusal",
    [
        (
            "75",
            ["core", "docs", "stduies"],
            "gpu_session.sh: no stage 'stduies' (stages: core, docs, studies); nothing was run",
        ),
        ("10m", ["core"], "gpu_session.sh: SECONDS is a whole number of seconds, not '10m'"),
        ("75", [], "usage: scripts/gpu_session.sh OUT SECONDS core|docs|studies..."),
    ],
)
def test_a_gpu_session_refuses_a_bad_argument_before_its_time_is_spent(tmp_path, budget, stages, refusal):
    """A misspelled last stage is found before the stages ahead of it spend the GPU's minutes."""
    done = gpu_session(tmp_path, str(tmp_path / "out"), budget, *stages)
    assert (done.returncode, done.stderr.strip(), done.stdout) == (2, refusal, "")
    assert not (tmp_path / "out").exists() and not (tmp_path / "nvidia-smi-ran").exists()


def test_a_gpu_session_records_the_stack_and_starts_no_stage_it_has_no_time_for(tmp_path):
    """The session's preamble runs on this stack (every package the device needs imports), and a
    stage is started only with a minute of the budget left, less the reserve for packing up."""
    done = gpu_session(tmp_path, str(tmp_path / "out"), "75", "core", "docs")
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line.split(":")[0] for line in done.stdout.splitlines()[-3:]] == ["core", "docs", "gpu_session"]
    assert "core: not started, " in done.stdout and "docs: not started, " in done.stdout, done.stdout
    versions = (tmp_path / "out" / "versions.txt").read_text().splitlines()
    assert versions[0] == "NVIDIA H200, 143771 MiB, 570.86.15", versions
    assert versions[1].startswith(f"{sys.version.split()[0]} torch "), versions
    assert not (tmp_path / "out" / "results.db").exists()


def test_a_gpu_session_without_a_gpu_stops_before_any_stage(tmp_path):
    done = gpu_session(tmp_path, str(tmp_path / "out"), "600", "core", card="")
    assert done.returncode == 1 and "core" not in done.stdout, done.stdout
    assert done.stderr.splitlines()[0].startswith(
        "gpu_session.sh: no GPU, or a package the session needs does not import"
    )
    assert not (tmp_path / "out" / "checks").exists()
