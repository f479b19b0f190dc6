"""Scale-out: the pod launcher (a real local Ray) runs cells in parallel, PostgreSQL holds the same
rows as SQLite, and schema creation is safe when many workers start at once. Real SLURM and Ray
clusters: tests/test_slurm.py, tests/test_ray_cluster.py."""

import json
import multiprocessing as mp
import time
from pathlib import Path

import pytest

from sweep.store.database import StoreError, filesystem_of, open_store
from tests.support.postgres import create_database, drop_database, postgres_reason, rows
from tests.support.sweeps import query, run_sweep

# training=full: no worker's fork server preloads PEFT (tests/support/sweeps.py FAST)
SLOW_CELLS = ["sweep=none", "family=faulty", "preset=slow", "mode=none,layer", "+shape.tokens=16,24", "training=full"]
IDENTITY = "select cell_key, family, preset, mode, tokens, status from cells order by cell_key"


def _spans(url: str) -> list[tuple]:
    import datetime as dt

    return sorted(
        (dt.datetime.fromisoformat(str(at)) - dt.timedelta(seconds=wall), dt.datetime.fromisoformat(str(at)))
        for at, wall in rows(url, "select recorded_at, wall_s from cells")
    )


def _overlapping(url: str) -> bool:
    """Some cell started before the one before it had ended."""
    spans = _spans(url)
    return any(start < previous_end for (_, previous_end), (start, _) in zip(spans, spans[1:]))


def _cell_phase_s(url: str) -> float:
    """From the first cell's start to the last cell's end, by the cells' own records (the launcher's
    and interpreter's start-up left out)."""
    import datetime as dt

    spans = [
        (dt.datetime.fromisoformat(str(at)), wall) for at, wall in rows(url, "select recorded_at, wall_s from cells")
    ]
    return (max(at for at, _ in spans) - min(at - dt.timedelta(seconds=wall) for at, wall in spans)).total_seconds()


@pytest.fixture
def pod_run(tmp_path_factory):
    """The same 4 sleep-bound cells sequentially (local launcher, SQLite) and on the pod launcher with
    2 workers (into PostgreSQL where a server is available, else SQLite)."""
    folder = tmp_path_factory.mktemp("pod")
    urls = {"local": f"sqlite:///{folder / 'local.db'}", "pod": f"sqlite:///{folder / 'pod.db'}"}
    postgres = None
    if postgres_reason() is None:
        postgres = create_database()
        urls["pod"] = postgres[1]
    timings, outputs = {}, {}
    for launcher in ("local", "pod"):
        started = time.perf_counter()
        done = run_sweep(
            folder / "unused.db",
            *SLOW_CELLS,
            f"launcher={launcher}",
            "workers=2",
            f"db.url={urls[launcher]}",
            "measure.warmup_steps=1",
            "measure.steps=4",
            timeout=600,
        )
        timings[launcher] = time.perf_counter() - started
        outputs[launcher] = done.stdout
        assert done.returncode == 0, done.stderr[-3000:]
    cells = {launcher: _cell_phase_s(url) for launcher, url in urls.items()}
    print(
        f"\npod/local wall time: {timings['pod']:.1f} s / {timings['local']:.1f} s = {timings['pod'] / timings['local']:.2f}; "
        f"cell phase: {cells['pod']:.1f} s / {cells['local']:.1f} s = {cells['pod'] / cells['local']:.2f}"
    )
    yield urls, timings, cells, outputs
    if postgres:
        drop_database(postgres[0])


@pytest.mark.long
def test_pod_launcher_runs_each_cell_once_in_parallel_on_distinct_workers(pod_run):
    urls, _, _, outputs = pod_run
    # the driver itself saw each cell end (its progress bar moves; off a terminal, a JSON line each)
    for launcher in ("local", "pod"):
        ended = [json.loads(line) for line in outputs[launcher].splitlines() if line.startswith("{")]
        assert sorted(line["status"] for line in ended) == ["ok"] * 4, outputs[launcher][-2000:]
    for launcher, workers in (("local", 1), ("pod", 2)):
        assert rows(urls[launcher], "select count(*), count(distinct cell_key) from cells") == [(4, 4)]
        assert rows(urls[launcher], "select count(*) from cells where status != 'ok'") == [(0,)]
        workers_seen = [
            json.loads(w) if isinstance(w, str) else w for (w,) in rows(urls[launcher], "select worker from cells")
        ]
        assert len({w["pid"] for w in workers_seen}) == workers
        # at the priority of the sweep itself: Ray lowers its workers to nice 15 unless told otherwise
        assert {w["niceness"] for w in workers_seen} == {0}
    # Parallel by what happened, not by a wall-clock ratio (printed by the fixture: a busy machine moves
    # it): on the pod, cells ran at the same time; sequentially, never.
    assert _overlapping(urls["pod"]) and not _overlapping(urls["local"])
    # the pod wrote from 2 workers at once (into PostgreSQL where there is a server): the same rows
    assert rows(urls["pod"], IDENTITY) == rows(urls["local"], IDENTITY)


def test_slurm_with_a_sqlite_file_is_refused(tmp_path):
    done = run_sweep(tmp_path / "r.db", "sweep=none", "preset=tiny", "launcher=slurm", "slurm.partition=gpu")
    assert done.returncode != 0
    assert "launcher=slurm runs cells on many nodes, which cannot share a SQLite file safely" in done.stderr
    assert not (tmp_path / "r.db").exists() or query(tmp_path / "r.db", "select count(*) from cells") == [(0,)]


def test_sqlite_on_a_network_file_system_is_refused(tmp_path, monkeypatch):
    mounts = "/dev/sda1 / ext4 rw 0 0\nserver:/export /mnt/shared nfs4 rw 0 0\n"
    assert filesystem_of(Path("/mnt/shared/runs/results.db"), mounts) == ("/mnt/shared", "nfs4")
    assert filesystem_of(Path("/mnt/sharedx/results.db"), mounts) == ("/", "ext4")
    monkeypatch.setattr("sweep.store.database.filesystem_of", lambda path: ("/mnt/shared", "nfs4"))
    with pytest.raises(StoreError, match=r"is on a network file system \(nfs4 at /mnt/shared\).*use a PostgreSQL URL"):
        open_store(f"sqlite:///{tmp_path / 'r.db'}")


def _open(url: str) -> None:
    open_store(url).dispose()


def open_at_once(url: str, processes: int = 4) -> None:
    context = mp.get_context("spawn")
    workers = [context.Process(target=_open, args=(url,)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0] * processes


def test_postgres_schema_creation_survives_parallel_starts(postgres_url):
    open_at_once(postgres_url)
    assert rows(postgres_url, "select count(*) from runs") == [(0,)]


def test_launcher_presets_compose_into_launcher_configs():
    """Every preset composes; its launcher settings are what the preset promises on this machine."""
    from hydra import compose, initialize_config_dir

    from sweep.machine.gpus import count as gpu_count
    from sweep.run.app import CONFIG_PATH

    def launcher(*overrides):
        with initialize_config_dir(config_dir=CONFIG_PATH, version_base=None):
            return compose("config", overrides=list(overrides), return_hydra_config=True).hydra.launcher

    assert "BasicLauncher" in launcher()._target_
    pod = launcher("launcher=pod", "workers=3")
    assert "RayLauncher" in pod._target_
    gpus = 1 if gpu_count() else 0  # one GPU per cell where there are GPUs, else `workers` CPU cells
    assert pod.ray.remote.num_gpus == gpus and pod.ray.init.num_cpus == (None if gpus else 3)
    cluster = launcher("launcher=ray-cluster", "ray_address=ray://head:10001")
    assert cluster.ray.init.address == "ray://head:10001" and cluster.ray.remote.num_gpus == 1
    assert cluster._target_ == pod._target_ == "hydra_plugins.ckpt_sweep.RayLauncher"
    assert cluster.ray.remote.max_retries == pod.ray.remote.max_retries == 0  # a crashed cell is not run again
    slurm = launcher("launcher=slurm", "slurm.partition=a100", "slurm.gpus_per_task=1", "slurm.array_parallelism=16")
    assert slurm._target_ == "hydra_plugins.ckpt_sweep.SlurmLauncher"
    assert (slurm.partition, slurm.gpus_per_task, slurm.array_parallelism, slurm.tasks_per_node) == ("a100", 1, 16, 1)
