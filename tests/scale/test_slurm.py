"""launcher=slurm against a real SLURM: the one-host cluster of scripts/slurm.sh (a `cpu` partition
without GPUs, a `gpu` partition whose node declares two, accounting storage off). The tests skip,
saying why, where it is not running (CKPT_SWEEP_SLURM_CONF unset). They may run at once on several
xdist workers, as sweeps of several users share a cluster: each looks only at its own arrays."""

import json
import os
import subprocess
import time

import pytest

from tests.support.postgres import create_database, drop_database, rows
from tests.support.sweeps import run_sweep, start_sweep

# training=full: no array task's fork server preloads PEFT (tests/support/sweeps.py FAST)
FAST_CELLS = ["sweep=none", "family=faulty", "measure.warmup_steps=0", "measure.steps=1", "training=full"]
# The tests that use `time_limited` run on one xdist worker: a session fixture is once per worker,
# and a second worker would submit (and wait out) the time-limited array again.
TIME_LIMITED = pytest.mark.xdist_group("slurm-time-limit")


@pytest.fixture(scope="session")
def slurm_env():
    """The environment that points SLURM's commands at the test cluster."""
    conf = os.environ.get("CKPT_SWEEP_SLURM_CONF")
    if not conf:
        pytest.skip("no SLURM test cluster: scripts/slurm.sh start prints the file to export as CKPT_SWEEP_SLURM_CONF")
    env = {"SLURM_CONF": conf}
    try:
        listing = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, env={**os.environ, **env})
    except OSError as error:
        pytest.skip(f"SLURM's client is not installed: {error}")
    if listing.returncode != 0 or {"cpu", "gpu"} - set(listing.stdout.split()):
        pytest.skip(f"the SLURM test cluster does not answer: {listing.stderr.strip() or listing.stdout.strip()}")
    return env


@pytest.fixture(scope="session")
def time_limited(slurm_env, tmp_path_factory):
    """A sweep whose cell hangs under a 1-minute time limit, started in the background by the first
    test that asks for it, so its minute of waiting overlaps the other tests."""
    name, url = create_database()
    folder = tmp_path_factory.mktemp("time-limit")
    sweep = start_sweep(
        folder / "unused.db",
        *FAST_CELLS,
        "preset=ok,hang",
        "mode=none",
        f"db.url={url}",
        "launcher=slurm",
        "slurm.partition=cpu",
        "slurm.gpus_per_task=null",
        "slurm.time_min=1",
        extra_env=slurm_env,
    )
    yield sweep, url
    if sweep.poll() is None:
        sweep.kill()
        sweep.communicate()
        for array in submitted_arrays(folder / "multirun"):
            slurm(slurm_env, "scancel", array)
    drop_database(name)


def submitted_arrays(sweep_dir) -> set[str]:
    """The job arrays a sweep submitted, by its submitit folders (other tests' arrays may be running)."""
    folder = sweep_dir / ".submitit"
    return {f.name.split("_")[0] for f in folder.iterdir() if f.name[0].isdigit()} if folder.exists() else set()


def slurm(env: dict, *command: str) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True, env={**os.environ, **env}).stdout


def recorded(url: str) -> dict[str, dict]:
    """Each recorded cell (by preset/mode): status, reason, worker identity, when it ran."""
    cells = {}
    for preset, mode, status, reason, worker, at, wall, attempt in rows(
        url, "select preset, mode, status, reason, worker, recorded_at, wall_s, attempt from cells"
    ):
        worker = json.loads(worker) if isinstance(worker, str) else worker
        cells[f"{preset}/{mode}"] = dict(status=status, reason=reason, worker=worker, at=at, wall=wall, attempt=attempt)
    return cells


def cells_recorded(url: str) -> int:
    """How many cells a sweep has recorded so far (0 before it has created its tables)."""
    from sqlalchemy.exc import ProgrammingError

    try:
        return rows(url, "select count(*) from cells")[0][0]
    except ProgrammingError:
        return 0


def overlapping(cells: dict[str, dict]) -> bool:
    """Some cell started (recorded_at less its wall time) before the one before it had ended."""
    import datetime as dt

    spans = sorted((c["at"] - dt.timedelta(seconds=c["wall"]), c["at"]) for c in cells.values())
    return any(start < previous_end for (_, previous_end), (start, _) in zip(spans, spans[1:]))


@TIME_LIMITED
@pytest.mark.long
def test_a_job_array_on_the_gpu_partition_runs_each_cell_once_within_its_parallelism(
    tmp_path, postgres_url, slurm_env, time_limited
):
    """The preset's defaults on the gpu partition: one GPU per task, seen by the cell; at most
    `array_parallelism` tasks at once (the node could run two); accounting off costs one line.
    (time_limited: started here, checked by its own test.)"""
    done = run_sweep(
        tmp_path / "unused.db",
        *FAST_CELLS,
        "preset=slow",
        "measure.steps=4",
        "mode=none,layer",
        f"db.url={postgres_url}",
        "launcher=slurm",
        "slurm.partition=gpu",
        "slurm.array_parallelism=1",
        extra_env=slurm_env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [script] = (tmp_path / "multirun" / ".submitit").glob("*/*_submission.sh")
    assert "#SBATCH --array=0-1%1" in script.read_text() and "#SBATCH --gpus-per-task=1" in script.read_text()
    cells = recorded(postgres_url)
    assert sorted(cells) == ["slow/layer", "slow/none"]
    assert rows(postgres_url, "select count(*), count(distinct cell_key) from cells") == [(2, 2)]
    for cell in cells.values():
        worker = cell["worker"]
        assert cell["status"] == "ok" and worker["slurm_job_partition"] == "gpu" and worker["slurmd_nodename"] == "gpu0"
        assert worker["cuda_visible_devices"] == worker["slurm_step_gpus"] in ("0", "1")
        assert worker["slurm_gpus_on_node"] == "1" and worker["slurm_array_task_id"] in ("0", "1")
    assert not overlapping(cells)
    assert done.stderr.count("SLURM accounting is not available") == 1
    assert "Bypassing" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.long
def test_a_cancelled_array_resumes_without_rerunning_or_doubling_cells(tmp_path, postgres_url, slurm_env):
    command = [
        *FAST_CELLS,
        "preset=slow",
        "measure.steps=6",
        "mode=none,layer,unsloth",
        f"db.url={postgres_url}",
        f"hydra.sweep.dir={tmp_path}/multirun",
        "launcher=slurm",
        "slurm.partition=gpu",
        "slurm.array_parallelism=2",
    ]
    sweep = start_sweep(tmp_path / "unused.db", *command, extra_env=slurm_env)
    deadline = time.monotonic() + 300
    while not cells_recorded(postgres_url):
        assert sweep.poll() is None and time.monotonic() < deadline, "no cell was recorded"
        time.sleep(0.5)
    [array] = submitted_arrays(tmp_path / "multirun")
    slurm(slurm_env, "scancel", array)
    _, stderr = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, stderr[-3000:]
    assert "array task(s) ended without recording a cell" in stderr and "run the same command again" in stderr
    assert "Traceback" not in stderr
    before = recorded(postgres_url)
    assert 1 <= len(before) < 3

    done = run_sweep(tmp_path / "unused.db", *command, extra_env=slurm_env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    after = recorded(postgres_url)
    assert rows(postgres_url, "select count(*), count(distinct cell_key) from cells") == [(3, 3)]
    assert {c["status"] for c in after.values()} == {"ok"}
    for name, cell in before.items():  # recorded before the cancel: not measured again
        assert after[name]["at"] == cell["at"] and after[name]["attempt"] == 1


@TIME_LIMITED
def test_a_cell_that_would_outlive_the_time_limit_is_recorded_as_a_timeout(time_limited):
    """A hanging cell under a 1-minute limit is recorded `timeout`, naming SLURM, before SLURM kills
    the task (which would record nothing); the other cell of the array finishes. On the cpu
    partition, which is the preset one override away (slurm.gpus_per_task=null)."""
    sweep, url = time_limited
    _, stderr = sweep.communicate(timeout=600)
    assert sweep.returncode == 0, stderr[-3000:]
    cells = recorded(url)
    assert cells["ok/none"]["status"] == "ok" and cells["ok/none"]["worker"]["slurmd_nodename"] == "cpu0"
    assert cells["hang/none"]["status"] == "timeout"
    assert cells["hang/none"]["reason"].startswith("SLURM time limit: job ")
    assert "raise slurm.time_min" in cells["hang/none"]["reason"]


@pytest.mark.long
def test_a_gpu_request_on_a_partition_without_gpus_is_one_line_before_anything_is_submitted(
    tmp_path, postgres_url, slurm_env
):
    done = run_sweep(
        tmp_path / "unused.db",
        *FAST_CELLS,
        "preset=ok",
        f"db.url={postgres_url}",
        "launcher=slurm",
        "slurm.partition=cpu",
        "slurm.mem_gb=100000",
        extra_env=slurm_env,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "slurm.gpus_per_task=1, but partition cpu has no GPUs" in done.stderr
    assert "slurm.mem_gb=100000, but the largest node of partition cpu has" in done.stderr
    assert not (tmp_path / "multirun" / ".submitit").exists()

    # Where sinfo cannot tell (here: it fails), sbatch's own refusal, in one line.
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "sinfo").write_text("#!/bin/sh\necho 'sinfo: error: stand-in' >&2\nexit 1\n")
    (shim / "sinfo").chmod(0o755)
    env = {**slurm_env, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    done = run_sweep(
        tmp_path / "unused.db", *FAST_CELLS, "preset=ok", f"db.url={postgres_url}", "launcher=slurm",
        "slurm.partition=cpu", extra_env=env,
    )  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if "sbatch refused the job array" in line]
    assert line.startswith("ckpt-sweep: sbatch refused the job array: ") and "node configuration" in line
    assert rows(postgres_url, "select count(*) from cells") == [(0,)]


# -- without a cluster: what the launcher reads from SLURM's commands ------------------------------


def test_time_left_is_read_in_every_form_squeue_prints():
    from sweep.launchers.slurm import parse_time_left

    assert parse_time_left("1-02:03:04") == 86400 + 2 * 3600 + 3 * 60 + 4
    assert parse_time_left("02:03:04") == 2 * 3600 + 3 * 60 + 4
    assert parse_time_left("03:04\n") == 184
    assert parse_time_left("UNLIMITED") is None and parse_time_left("") is None


def test_a_cells_timeout_is_cut_to_the_jobs_time_left(monkeypatch):
    from sweep.launchers import slurm

    monkeypatch.setattr(slurm, "_deadline", lambda: (time.monotonic() + 100, "12_3"))
    budget, why = slurm.cell_time_limit(900)
    assert 75 <= budget <= 80 and why.startswith("SLURM time limit: job 12_3 had 100 s left")
    assert slurm.cell_time_limit(30) == (30, None)  # its own timeout ends it first


def test_requests_are_checked_against_the_partitions_largest_node(monkeypatch):
    from types import SimpleNamespace

    from sweep.launchers import slurm

    nodes = {"a100": [{"name": "n1", "cpus": 64, "memory_mb": 512_000, "gpus": 8}], "cpu": []}
    monkeypatch.setattr(slurm, "partition_nodes", lambda partition: nodes.get(partition, []))
    monkeypatch.setattr(slurm, "partitions", lambda: ["a100", "cpu"])

    def ask(**settings):
        return slurm.request_problems(
            SimpleNamespace(**{"gpus_per_task": 1, "cpus_per_task": None, "mem_gb": None, **settings})
        )

    assert ask(partition="a100", cpus_per_task=16, mem_gb=256) == []
    [gpus] = ask(partition="a100", gpus_per_task=9)
    assert gpus.startswith("slurm.gpus_per_task=9, but the largest node of partition a100 has 8 GPU(s)")
    nodes["cpu"] = [{"name": "c1", "cpus": 8, "memory_mb": 32_000, "gpus": 0}]
    assert ask(partition="cpu")[0].startswith("slurm.gpus_per_task=1, but partition cpu has no GPUs")
    assert ask(partition="cpu", gpus_per_task=None) == []
    assert ask(partition="gpux") == ["slurm.partition=gpux: no such partition on this cluster (sinfo lists: a100, cpu)"]
    nodes["cpu"] = None
    assert ask(partition="cpu") == []  # sinfo cannot tell: sbatch will say


def test_sbatch_refusals_are_one_line():
    from subprocess import CalledProcessError

    from sweep.launchers.slurm import one_line

    wrapped = CalledProcessError(1, ["sbatch"], output=b"", stderr=b"")
    wrapped.output = "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
    assert one_line(wrapped) == "Batch job submission failed: Requested node configuration is not available"


def test_each_array_tasks_result_moves_the_drivers_progress_as_it_lands(tmp_path, monkeypatch):
    """The driver passes each result to the progress display when its file lands, not at the end;
    a task that ended without one (cancelled) is its SLURM state."""
    from types import SimpleNamespace

    from sweep.launchers import slurm

    class Task:
        def __init__(self, name: str, state: str, ended: bool):
            self.paths = SimpleNamespace(result_pickle=tmp_path / f"{name}.pkl")
            self.name, self.state, self.ended = name, state, ended

        def done(self) -> bool:
            return self.ended

        def results(self):
            return [SimpleNamespace(return_value={"cell": self.name, "status": "ok", "skipped": False})]

        def finish(self) -> None:
            self.paths.result_pickle.write_text("result")
            self.ended, self.state = True, "COMPLETED"

    first, cancelled, last = (
        Task("first", "RUNNING", False),
        Task("x", "CANCELLED", True),
        Task("last", "PENDING", False),
    )
    first.finish()
    seen = []
    monkeypatch.setattr("sweep.run.progress.job_ended", lambda ret: seen.append(ret.return_value["cell"]))
    polls = iter([lambda: seen.append("poll"), last.finish])
    monkeypatch.setattr(slurm.time, "sleep", lambda _: next(polls, lambda: None)())
    assert slurm.collect([first, cancelled, last]) == [None, "CANCELLED", None]
    assert seen == ["first", "poll", "last"]
