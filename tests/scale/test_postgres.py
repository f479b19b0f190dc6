"""PostgreSQL, the results database of the cluster launchers: GiB-sized peaks in its 64-bit columns, a first-round database widened in place, a sweep that outlives a server restart (each skips, saying why, without a server)."""

import os
import subprocess
import time

import pytest

from tests.support.ports import free_port
from tests.support.postgres import ROOT, rows
from tests.support.sweeps import FAST, start_sweep
from tests.sweep.test_store import (
    GIB,
    check_upgraded,
    claims_hold_one_writer_per_cell,
    first_round_database,
    merges_a_pods_runs_once_keeping_the_latest_attempt_current,
    removes_whole_runs_and_nothing_else,
    round_trip,
)


@pytest.fixture
def private_postgres():
    """A PostgreSQL cluster of this test's own (port 5433), so that restarting it cuts no other
    test's connection; removed afterwards. Skips where scripts/postgres.sh cannot start one."""
    if os.environ.get("CKPT_SWEEP_POSTGRES_EXTERNAL"):
        pytest.skip("the PostgreSQL server is not this machine's to restart")
    env = {**os.environ, "CKPT_SWEEP_PG_CLUSTER": "restart-test", "CKPT_SWEEP_PG_PORT": "5433"}
    script = str(ROOT / "scripts" / "postgres.sh")
    started = subprocess.run([script, "start"], capture_output=True, text=True, env=env)
    if started.returncode != 0:
        pytest.skip(f"no private PostgreSQL cluster could be started: {started.stderr.strip()[-300:]}")
    yield started.stdout.strip(), env
    subprocess.run([script, "remove"], capture_output=True, env=env)


def test_postgres_stores_80_gib_peaks(postgres_url):
    round_trip(postgres_url)
    assert rows(postgres_url, "select peak_bytes, host_offload_peak_bytes, weight_bytes from cells") == [
        (80 * GIB, 40 * GIB, 24 * GIB)
    ]


def test_postgres_claims_hold_one_writer_per_cell(postgres_url):
    claims_hold_one_writer_per_cell(postgres_url)


def test_a_pods_sqlite_runs_merge_into_postgres_once_at_80_gib(postgres_url, tmp_path):
    merges_a_pods_runs_once_keeping_the_latest_attempt_current(postgres_url, tmp_path)
    assert rows(postgres_url, "select max(peak_bytes) from cells") == [(80 * GIB,)]


def test_removing_runs_from_postgres_takes_them_whole_and_leaves_the_rest_at_80_gib(postgres_url):
    removes_whole_runs_and_nothing_else(postgres_url)


def test_a_first_round_postgres_database_is_widened_in_place(postgres_url):
    first_round_database(postgres_url, "postgresql")
    assert rows(
        postgres_url,
        "select data_type from information_schema.columns where table_name = 'cells' and column_name = 'peak_bytes'",
    ) == [("integer",)]
    check_upgraded(postgres_url)
    assert rows(
        postgres_url,
        "select data_type from information_schema.columns where table_name = 'cells' and column_name = 'peak_bytes'",
    ) == [("bigint",)]


@pytest.mark.long
def test_a_sweep_survives_a_postgres_restart_in_the_middle(tmp_path, private_postgres):
    postgres_url, env = private_postgres
    overrides = [
        "sweep=none",
        "family=faulty",
        "preset=slow",
        "+shape.tokens=8,12,16,20,24,28",
        *FAST,
        f"db.url={postgres_url}",
    ]
    process = start_sweep(tmp_path / "unused.db", *overrides)
    deadline = time.time() + 240
    while time.time() < deadline and _count(postgres_url) < 2:
        time.sleep(0.2)
    assert _count(postgres_url) >= 2, "the sweep recorded no cells"
    restarted = subprocess.run(
        [str(ROOT / "scripts" / "postgres.sh"), "restart"], capture_output=True, text=True, env=env
    )
    assert restarted.returncode == 0, restarted.stderr
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    assert rows(
        postgres_url,
        "select count(*), count(distinct cell_key), sum(case when status = 'ok' then 1 else 0 end) from cells",
    ) == [(6, 6, 6)]


def test_a_write_waits_for_a_server_that_refuses_new_connections(postgres_url):
    """A restart is seen from outside as a cut connection, then refused ones ("the database system is
    shutting down", "connection refused"); psycopg's real refusal, as SQLAlchemy raises it on connect."""
    from sqlalchemy import event

    from sweep.store import database as store

    engine = store.open_store(postgres_url)
    engine.dispose()
    closed_port = free_port()  # nothing listens there: psycopg's connect is refused
    refusals = []

    @event.listens_for(engine, "do_connect")
    def refuse_twice(_dialect, _record, _args, params):
        if len(refusals) < 2:
            refusals.append(params.get("port"))
            params.update(host="127.0.0.1", port=closed_port)

    run_id = store.get_or_create_run(engine, "after-restart", "cpu")
    assert len(refusals) == 2
    assert rows(postgres_url, "select id, name from runs") == [(run_id, "after-restart")]
    engine.dispose()


def test_a_test_database_is_dropped_while_a_process_of_another_role_is_in_it(postgres_url):
    """DROP DATABASE ... WITH (FORCE) ends only the processes of roles the test role is a member of,
    unless it is in pg_signal_backend (scripts/postgres.sh grants it): CI's teardown once failed on an
    autovacuum worker, which belongs to no role. Here the other process is a client of another role."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from tests.support.postgres import admin, create_database, drop_database

    if (
        os.environ.get("CKPT_SWEEP_POSTGRES_EXTERNAL")
        or subprocess.run(["id", "postgres"], capture_output=True).returncode
    ):
        pytest.skip("another role can only be made on this machine's own server")
    port = make_url(postgres_url).port or 5432
    other = "ckpt_other"
    subprocess.run(
        ["su", "postgres", "-c", f"psql -q -p {port} -v ON_ERROR_STOP=1"],
        input=f"DROP ROLE IF EXISTS {other}; CREATE ROLE {other} LOGIN PASSWORD '{other}';",
        text=True,
        check=True,
        capture_output=True,
    )
    name, url = create_database()
    engine = create_engine(make_url(url).set(username=other, password=other))
    connection = engine.connect()
    try:
        connection.execute(text("select 1"))
        drop_database(name)
    finally:
        connection.invalidate()  # the drop ended its backend; closing would roll back on a dead socket
        engine.dispose()
        admin(f"DROP DATABASE IF EXISTS {name}")
        subprocess.run(["su", "postgres", "-c", f"psql -q -p {port} -c 'DROP ROLE {other}'"], capture_output=True)
    assert rows(postgres_url, f"select count(*) from pg_database where datname = '{name}'") == [(0,)]


def _count(url: str) -> int:
    try:
        return rows(url, "select count(*) from cells")[0][0]
    except Exception:  # noqa: BLE001 - the tables may not exist yet, or the server is restarting
        return 0


@pytest.mark.long
def test_no_password_is_stored_or_left_in_hydras_files(tmp_path, postgres_url, monkeypatch):
    """The database URL's password: never in a run's stored config, never in Hydra's multirun.yaml,
    whether given on the command line or in CKPT_SWEEP_DB_URL."""
    from sqlalchemy.engine import make_url

    from tests.support.sweeps import run_sweep

    secret = f":{make_url(postgres_url).password}@"  # as it stands in the URL (the user may share its word)
    assert secret in postgres_url
    folder = tmp_path / "given"
    done = run_sweep(folder / "unused.db", "sweep=none", "preset=tiny", "mode=none", *FAST, f"db.url={postgres_url}")
    assert done.returncode == 0, done.stderr[-2000:]
    [(stored,)] = rows(postgres_url, "select config->'db'->>'url' from runs")
    assert secret not in stored and stored == postgres_url.replace(secret, ":***@")
    saved = (folder / "multirun" / "multirun.yaml").read_text()
    assert secret not in saved and "***" in saved
    monkeypatch.setenv("CKPT_SWEEP_DB_URL", postgres_url)
    folder = tmp_path / "environment"
    done = run_sweep(folder / "unused.db", "sweep=none", "preset=tiny", "mode=layer", *FAST, db_url=None)
    assert done.returncode == 0, done.stderr[-2000:]
    assert rows(postgres_url, "select mode from cells order by mode") == [("layer",), ("none",)]
    assert secret not in (folder / "multirun" / "multirun.yaml").read_text()
