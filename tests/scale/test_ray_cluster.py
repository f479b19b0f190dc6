"""launcher=ray-cluster against a real, standalone Ray head (scripts/ray.sh), started outside the
sweep as a cluster is: cells run on its workers into PostgreSQL, a worker killed mid-cell leaves
that cell `crashed` and the sweep goes on, and stopping the head leaves no Ray process behind. The
tests skip, saying why, where the head cannot start."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from sqlalchemy.exc import ProgrammingError

from tests.support.ports import free_port
from tests.support.postgres import rows
from tests.support.sweeps import ROOT, SUPPORT, run_sweep, session_processes, start_sweep

# One pytest-xdist worker runs this module: its tests share one Ray head per worker.
pytestmark = pytest.mark.xdist_group("ray-head")

SCRIPT = ROOT / "scripts" / "ray.sh"
# training=full: no Ray worker's fork server preloads PEFT (tests/support/sweeps.py FAST)
CELLS = ["sweep=none", "family=faulty", "mode=none", "measure.warmup_steps=0", "training=full"]
# The head's CPUs only (the test machine has no GPU); token authentication, as `ray start` sets up.
CLUSTER = ["launcher=ray-cluster", "hydra.launcher.ray.remote.num_gpus=0"]
DRIVER_ENV = {"RAY_AUTH_MODE": "token"}


def start_head() -> tuple[str, str, dict, Path]:
    """A Ray head in a session of its own, whose workers can import the test families: its address,
    session id, environment and folder (skips, saying why, where it cannot start). Its GCS listens
    on a port free now: a head left running by an earlier, killed test run holds the port it had,
    and a new head there joins the old one's storage ("Session name ... does not match")."""
    folder = Path(tempfile.mkdtemp(prefix="ckpt-ray-"))  # Ray's socket paths must stay under 108 bytes
    env = {
        **os.environ,
        "RAY": os.path.join(os.path.dirname(sys.executable), "ray"),
        "CKPT_SWEEP_RAY_DIR": str(folder),
        "CKPT_SWEEP_RAY_PORT": str(free_port()),
        "PYTHONPATH": str(SUPPORT),
    }
    started = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, env=env, timeout=180)
    if started.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"the Ray head did not start: {started.stderr.strip()[-500:]}")
    return started.stdout.strip(), (folder / "session").read_text().strip(), env, folder


def stop_head(env: dict, folder: Path) -> None:
    subprocess.run([str(SCRIPT), "stop"], env=env, timeout=120, check=True)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_head():
    address, session, env, folder = start_head()
    yield address, session, env
    stop_head(env, folder)


def claim_owners(url: str) -> set[int]:
    """The pids of the processes holding a cell's claim now (none before the sweep made its tables)."""
    try:
        return {int(owner.rpartition(":")[2]) for (owner,) in rows(url, "select owner from claims")}
    except ProgrammingError:
        return set()


def cells(url: str) -> dict[str, dict]:
    found = {}
    for preset, status, reason, worker in rows(url, "select preset, status, reason, worker from cells"):
        found[preset] = dict(
            status=status, reason=reason, worker=json.loads(worker) if isinstance(worker, str) else worker
        )
    return found


@pytest.mark.long
def test_cells_run_on_the_clusters_workers_into_postgres(tmp_path, postgres_url, ray_head):
    address, _, env = ray_head
    done = run_sweep(
        tmp_path / "unused.db",
        *CELLS,
        "preset=ok,slow",
        "measure.steps=2",
        *CLUSTER,
        f"ray_address={address}",
        f"db.url={postgres_url}",
        extra_env=DRIVER_ENV,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = cells(postgres_url)
    assert {name: c["status"] for name, c in recorded.items()} == {"ok": "ok", "slow": "ok"}
    logs = {p.name for p in (Path(env["CKPT_SWEEP_RAY_DIR"]) / "session_latest" / "logs").iterdir()}
    for cell in recorded.values():  # run by the standalone head's workers, not a Ray of the sweep's own
        worker = cell["worker"]
        assert any(n.startswith("python-core-worker-") and n.endswith(f"_{worker['pid']}.log") for n in logs), worker


@pytest.mark.long
def test_a_gpu_request_the_cluster_cannot_meet_is_one_line(tmp_path, postgres_url, ray_head):
    address, _, _ = ray_head
    done = run_sweep(
        tmp_path / "unused.db", *CELLS, "preset=ok", "launcher=ray-cluster", f"ray_address={address}",
        f"db.url={postgres_url}", extra_env=DRIVER_ENV,
    )  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "each cell asks for 1 GPU(s) (hydra.launcher.ray.remote.num_gpus), but the largest node" in done.stderr


@pytest.mark.long
def test_a_worker_killed_mid_cell_leaves_it_crashed_and_the_sweep_goes_on(tmp_path, postgres_url, ray_head):
    """One cell at a time (each asks for both CPUs): the first hangs; its Ray worker is killed while
    it runs. Nothing of that worker is left (its fork server and cell die with it), the cell is
    recorded `crashed`, the next cell runs."""
    address, session, _ = ray_head
    sweep = start_sweep(
        tmp_path / "unused.db",
        *CELLS,
        "preset=hang,ok",
        "measure.steps=1",
        *CLUSTER,
        "hydra.launcher.ray.remote.num_cpus=2",
        f"ray_address={address}",
        f"db.url={postgres_url}",
        extra_env=DRIVER_ENV,
    )
    deadline = time.monotonic() + 300
    # The worker measuring the hanging cell (the first claimed), once its cell process exists: a child
    # of its fork server after the claim (before it, a child may answer what needs torch, app.py).
    while True:
        claimed = claim_owners(postgres_url)
        processes = session_processes(session)
        servers = {pid for pid, ppid, _ in processes if ppid in claimed}
        cell_processes = [pid for pid, ppid, _ in processes if ppid in servers]
        if claimed and cell_processes:
            break
        assert sweep.poll() is None and time.monotonic() < deadline, "the hanging cell never started"
        time.sleep(0.5)
    [worker] = claimed
    own = [pid for pid, ppid, _ in processes if ppid == worker] + cell_processes
    os.kill(worker, 9)
    _, stderr = sweep.communicate(timeout=600)
    assert sweep.returncode == 0, stderr[-3000:]
    recorded = cells(postgres_url)
    assert recorded["hang"]["status"] == "crashed"
    assert recorded["hang"]["reason"].startswith("the Ray worker running the cell died before it recorded anything")
    assert recorded["ok"]["status"] == "ok"
    alive = {pid for pid, _, _ in session_processes(session)}
    assert not alive & set(own), "the killed worker's fork server or cell outlived it"


@pytest.mark.long
def test_stopping_the_head_leaves_no_ray_process():
    _, session, env, folder = start_head()
    assert session_processes(session)
    stop_head(env, folder)
    assert session_processes(session) == []
