"""The results database at real magnitudes: 64-bit byte columns, versioned migrations of first-round
databases (SQLite and PostgreSQL, in place), attempts kept, reconnects across a server restart,
and files that cannot be used refused in one line with nothing written."""

import io
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from sweep.store import database as store
from sweep.store.migrations import schema_version
from sweep.store.query import load_cells, select_runs
from sweep.store.results import CellResult
from sweep.store.schema import SCHEMA_VERSION
from tests.support.sweeps import SUPPORT, run_cli, run_sweep

GIB = 2**30
CELL = {"family": "synthetic", "preset": "packed-16384", "mode": "layer", "backend": "torch", "training": "frozen"}


def big_result(**values) -> CellResult:
    return CellResult(
        "ok",
        **{"sec_per_step": 1.116, **values},
        peak_bytes=80 * GIB,
        peak_reserved_bytes=96 * GIB,
        first_step_peak_bytes=81 * GIB,
        host_offload_peak_bytes=40 * GIB,
        weight_bytes=24 * GIB,
        samples=[(1.2, True), (1.1, False)],
    )


def round_trip(url: str) -> None:
    engine = store.open_store(url)
    run_id = store.get_or_create_run(engine, "big", "H100 80GB HBM3", environment={"hardware": "H100 80GB HBM3"})
    store.record_cell(engine, run_id, CELL, "k1", big_result(), shape={"tokens": 16384, "batch": 1})
    [cell] = load_cells(engine, select_runs(engine)).to_dict("records")
    assert (cell["peak_bytes"], cell["tokens"]) == (80 * GIB, 16384)
    engine.dispose()


def claims_hold_one_writer_per_cell(url: str) -> None:
    """NOTE [ One writer per cell ]: a held cell is refused to another writer; its record ends the
    claim; an expired claim, or one of a process of this host that is gone, is taken over."""
    engine = store.open_store(url)
    run_id = store.get_or_create_run(engine, "claims", "CPU: x")
    here, there = "elsewhere:1", "elsewhere:2"
    assert store.claim_cell(engine, run_id, "k", 3600, owner=here) == store.Claimed(True)
    assert store.claim_cell(engine, run_id, "k", 3600, owner=there) == store.Claimed(False, here)
    assert store.claim_cell(engine, run_id, "k", 3600, owner=here).held  # its own writer again
    store.record_cell(engine, run_id, CELL, "k", big_result())
    after = store.claim_cell(engine, run_id, "k", 3600, owner=there)
    assert after.held and (after.recorded.status, after.recorded.attempt) == ("ok", 1)
    store.release_claim(engine, run_id, "k", owner=there)
    assert store.claim_cell(engine, run_id, "k", 3600, owner=here).held

    store.claim_cell(engine, run_id, "expired", -1, owner=here)
    assert store.claim_cell(engine, run_id, "expired", 3600, owner=there).held
    finished = subprocess.Popen(["true"])
    finished.wait()
    store.claim_cell(engine, run_id, "dead", 3600, owner=f"{socket.gethostname()}:{finished.pid}")
    assert store.claim_cell(engine, run_id, "dead", 3600, owner=there).held
    store.claim_cell(engine, run_id, "alive", 3600, owner=store.writer())  # this process, alive
    assert store.claim_cell(engine, run_id, "alive", 3600, owner=there) == store.Claimed(False, store.writer())
    engine.dispose()


def test_sqlite_claims_hold_one_writer_per_cell(tmp_path):
    claims_hold_one_writer_per_cell(f"sqlite:///{tmp_path / 'claims.db'}")


def test_sqlite_round_trips_80_gib_peaks(tmp_path):
    round_trip(f"sqlite:///{tmp_path / 'big.db'}")


def test_every_byte_and_count_column_is_declared_64_bit(tmp_path):
    """SQLite stores any integer in 8 bytes whatever a column says, so a round trip there cannot
    catch a 32-bit column; its declared type can (PostgreSQL's INTEGER overflows at 2 GiB)."""
    engine = store.open_store(f"sqlite:///{tmp_path / 'types.db'}")
    with engine.connect() as connection:
        declared = {row[1]: row[2] for row in connection.exec_driver_sql("PRAGMA table_info(cells)")}
    engine.dispose()
    integers = {name: kind for name, kind in declared.items() if "INT" in kind}
    wide = {name for name, kind in integers.items() if kind == "BIGINT"}
    assert {"peak_bytes", "peak_reserved_bytes", "first_step_peak_bytes", "weight_bytes", "tokens", "batch"} <= wide
    assert set(integers) - wide == {"id", "run_id", "attempt", "interval", "stride"}  # never near 2**31


def first_round_database(url: str, dialect: str) -> None:
    """A database as the first round wrote it: its DDL, a run, two cells (one with 'null' JSON), samples."""
    engine = create_engine(url)
    ddl = "\n".join(
        line for line in (SUPPORT / f"schema_v1_{dialect}.sql").read_text().splitlines() if not line.startswith("--")
    )
    with engine.begin() as connection:
        for statement in filter(str.strip, ddl.split(";")):
            connection.exec_driver_sql(statement)
        connection.execute(
            text(
                "INSERT INTO runs (name, hardware, provenance, environment, config, started_at) "
                "VALUES ('old', 'CPU: x', 'measured', '{}', '{}', '2026-01-01')"
            )
        )
        run_id = connection.execute(text("SELECT id FROM runs")).scalar()
        for key, breakdown in (("a", '{"activations": 5}'), ("b", "null")):
            connection.execute(
                text(
                    "INSERT INTO cells (run_id, cell_key, family, preset, mode, quantization, status, peak_bytes, "
                    "breakdown, config, recorded_at) VALUES (:run, :key, 'synthetic', 'cpu-256', 'layer', 'none', 'ok', "
                    "1000, :breakdown, '{}', '2026-01-01')"
                ),
                {"run": run_id, "key": key, "breakdown": breakdown},
            )
            connection.execute(
                text(
                    "INSERT INTO samples (cell_id, step, seconds, warmup) SELECT id, 0, 0.5, false "
                    "FROM cells WHERE cell_key = :key"
                ),
                {"key": key},
            )
    engine.dispose()


def check_upgraded(url: str) -> None:
    engine = store.open_store(url)
    with engine.connect() as connection:
        assert schema_version(connection) == SCHEMA_VERSION
    run_id = store.get_or_create_run(engine, "old", "CPU: x")
    assert store.completed_cells(engine, run_id) == {"a": store.Recorded("ok"), "b": store.Recorded("ok")}
    store.record_cell(engine, run_id, CELL, "a", big_result())  # a second attempt of cell a, 80 GiB
    store.record_cell(engine, run_id, CELL, "c", big_result())
    engine.dispose()
    check = create_engine(url)
    with check.connect() as connection:
        cells = connection.execute(
            text(
                "select cell_key, attempt, is_current, peak_bytes, breakdown is null from cells "
                "order by cell_key, attempt"
            )
        ).all()
        samples = connection.execute(
            text(
                "select c.cell_key, count(*) from samples s join cells c on c.id = s.cell_id "
                "group by c.cell_key order by c.cell_key"
            )
        ).all()
    check.dispose()
    assert [(k, a, bool(current), peak, bool(null)) for k, a, current, peak, null in cells] == [
        ("a", 1, False, 1000, False),
        ("a", 2, True, 80 * GIB, True),
        ("b", 1, True, 1000, True),
        ("c", 1, True, 80 * GIB, True),
    ]  # no breakdown recorded: SQL NULL, not the text 'null'

    assert [tuple(s) for s in samples] == [("a", 3), ("b", 1), ("c", 2)]


def test_a_first_round_sqlite_database_upgrades_keeping_every_row(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    first_round_database(url, "sqlite")
    check_upgraded(url)


def test_an_early_first_round_database_upgrades_once_when_many_processes_start_at_once(tmp_path):
    """The earliest first-round files had no worker or weight columns either; four processes open it at
    once: one upgrades it, the others wait and find it upgraded."""
    from tests.scale.test_scale import open_at_once

    url = f"sqlite:///{tmp_path / 'old.db'}"
    first_round_database(url, "sqlite")
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE cells DROP COLUMN worker"))
        connection.execute(text("ALTER TABLE cells DROP COLUMN weight_bytes"))
    engine.dispose()
    open_at_once(url)
    check_upgraded(url)
    with sqlite3.connect(tmp_path / "old.db") as connection:
        # each step taken once, by one of the four
        assert connection.execute("select version from schema_version order by version").fetchall() == [
            (v,) for v in range(2, SCHEMA_VERSION + 1)
        ]
        columns = {row[1] for row in connection.execute("pragma table_info(cells)")}
    assert {"worker", "weight_bytes", "attempt", "versions"} <= columns


def test_a_newer_schema_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    store.open_store(url).dispose()
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO schema_version (version, upgraded_at) VALUES (99, '2030-01-01')"))
    engine.dispose()
    with pytest.raises(store.StoreError, match="schema version 99, newer than this ckpt-sweep's"):
        store.open_store(url)


def test_a_write_that_loses_its_connection_is_made_again(tmp_path):
    engine = store.open_store(f"sqlite:///{tmp_path / 'r.db'}")
    calls = []

    def write():
        calls.append(1)
        if len(calls) == 1:
            error = OperationalError("INSERT ...", {}, Exception("server closed the connection unexpectedly"))
            error.connection_invalidated = True
            raise error
        return "written"

    assert store.reconnecting(engine, write) == "written" and len(calls) == 2
    with pytest.raises(OperationalError):  # any other database error is not retried
        store.reconnecting(engine, lambda: (_ for _ in ()).throw(OperationalError("x", {}, Exception("locked"))))


@pytest.mark.parametrize(
    "verb", [["report", "--out", "{out}"], ["diff", "1", "2"], ["advise", "--family", "synthetic", "--vram", "24"]]
)
def test_read_verbs_refuse_a_database_that_does_not_exist(tmp_path, verb):
    db = tmp_path / "mistyped.db"
    done = run_cli([*[a.format(out=tmp_path / "reports") for a in verb], "--db", f"sqlite:///{db}"])
    assert done.returncode != 0 and f"no database at {db}" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not db.exists() and not (tmp_path / "reports").exists()


def test_read_verbs_refuse_a_database_without_runs(tmp_path):
    db = tmp_path / "empty.db"
    store.open_store(f"sqlite:///{db}").dispose()
    done = run_cli(["report", "--db", f"sqlite:///{db}", "--out", str(tmp_path / "reports")])
    assert done.returncode != 0 and "holds no runs yet" in done.stderr
    assert not (tmp_path / "reports" / "index.md").exists()


def test_a_read_only_database_is_read_but_never_written(tmp_path, monkeypatch):
    db = tmp_path / "ro.db"
    round_trip(f"sqlite:///{db}")
    monkeypatch.setattr("sweep.store.database.os.access", lambda path, mode: Path(path) != db)
    engine = store.open_store(f"sqlite:///{db}", create=False)
    assert len(load_cells(engine, select_runs(engine))) == 1
    engine.dispose()
    with pytest.raises(store.StoreError, match="is read-only: a sweep cannot record into it"):
        store.open_store(f"sqlite:///{db}")


def test_a_damaged_database_is_refused_and_left_as_it_was(tmp_path):
    db = tmp_path / "damaged.db"
    engine = store.open_store(f"sqlite:///{db}")
    run_id = store.get_or_create_run(engine, "r", "CPU: x")
    for i in range(100):
        store.record_cell(engine, run_id, CELL, f"k{i}", big_result(reason="x" * 500))
    engine.dispose()
    with sqlite3.connect(db) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with db.open("r+b") as file:
        file.seek(4096 * 5 + 100)
        file.write(b"\xff" * 2000)
    before = db.read_bytes()
    done = run_sweep(db, "sweep=none", "preset=tiny", "mode=none", "measure.warmup_steps=0", "measure.steps=1")
    assert done.returncode != 0 and f"database {db} is damaged (PRAGMA quick_check:" in done.stderr
    assert db.read_bytes() == before


def test_a_cell_whose_samples_cannot_be_written_leaves_no_row(tmp_path):
    """The cell row and its samples are one transaction: a sample insert that fails after the row
    was staged leaves neither (a row without samples would be skipped by resume as done)."""
    from sqlalchemy import event

    from sweep.store.schema import Sample

    engine = store.open_store(f"sqlite:///{tmp_path / 'r.db'}")
    run_id = store.get_or_create_run(engine, "r", "CPU")

    def refuse(*_):
        raise RuntimeError("disk full while writing samples")

    event.listen(Sample, "before_insert", refuse)
    try:
        with pytest.raises(RuntimeError, match="disk full"):
            store.record_cell(engine, run_id, CELL, "k1", big_result())
    finally:
        event.remove(Sample, "before_insert", refuse)
    assert store.completed_cells(engine, run_id) == {}
    with engine.connect() as connection:
        assert connection.execute(text("select count(*) from cells")).scalar() == 0
    store.record_cell(engine, run_id, CELL, "k1", big_result())
    with engine.connect() as connection:
        assert connection.execute(text("select count(*) from samples")).scalar() == 2


def test_two_runs_whose_cells_interleave_resume_independently(tmp_path):
    """Each run's completed cells are its own: a cell done in one run is still to do in the other."""
    engine = store.open_store(f"sqlite:///{tmp_path / 'r.db'}")
    a, b = (store.get_or_create_run(engine, name, "CPU") for name in ("a", "b"))
    for run_id, key in ((a, "k1"), (b, "k2"), (a, "k3"), (b, "k1")):
        store.record_cell(engine, run_id, CELL, key, big_result())
    assert set(store.completed_cells(engine, a)) == {"k1", "k3"}
    assert set(store.completed_cells(engine, b)) == {"k2", "k1"}


def merges_a_pods_runs_once_keeping_the_latest_attempt_current(target_url: str, tmp_path: Path) -> None:
    """NOTE [ Merging is idempotent ]: a pod's runs arrive whole (80 GiB peaks, samples, environment);
    merged again they add nothing; a cell measured on both sides keeps both attempts, the later one
    current; an id the source lacks is refused with nothing written."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from sweep.store.merge import merge_runs
    from sweep.store.schema import CellRow

    pod = store.open_store(f"sqlite:///{tmp_path / 'pod.db'}")
    gpu = store.get_or_create_run(pod, "packed-latents", "H200", environment={"hardware": "H200", "torch": "2.11"})
    store.record_cell(pod, gpu, CELL, "k1", big_result(), shape={"tokens": 16384, "batch": 1})
    store.record_cell(pod, gpu, {**CELL, "mode": "none"}, "k2", big_result(sec_per_step=0.878))
    store.finish_run(pod, gpu)
    home = store.open_store(target_url)
    mine = store.get_or_create_run(home, "packed-latents", "H200")
    store.record_cell(home, mine, {**CELL, "mode": "none"}, "k2", big_result(sec_per_step=0.9))  # before the pod's
    store.record_cell(pod, gpu, {**CELL, "mode": "none"}, "k2", big_result(sec_per_step=0.85))  # the pod's re-run
    store.get_or_create_run(pod, "large-shape", "H200")  # a run without cells arrives too

    with pytest.raises(ValueError, match="no run with id 99"):
        merge_runs(home, pod, [gpu, 99])
    assert [(m.new, m.added, m.present) for m in merge_runs(home, pod)] == [(False, 3, 0), (True, 0, 0)]
    assert [(m.added, m.present) for m in merge_runs(home, pod)] == [(0, 3), (0, 0)]

    cells = load_cells(home, select_runs(home)).to_dict("records")
    current = {(c["mode"], c["sec_per_step"], c["peak_bytes"], c["tokens"]) for c in cells}
    assert current == {("layer", 1.116, 80 * GIB, 16384), ("none", 0.85, 80 * GIB, None)}
    with Session(home) as session:
        attempts = session.execute(
            select(CellRow.cell_key, CellRow.attempt, CellRow.sec_per_step, CellRow.is_current)
            .where(CellRow.run_id == mine)
            .order_by(CellRow.cell_key, CellRow.attempt)
        ).all()
        samples = [len(c.samples) for c in session.scalars(select(CellRow).where(CellRow.run_id == mine))]
        environment = session.get(store.Run, mine).environment
    assert attempts == [("k1", 1, 1.116, True), ("k2", 1, 0.9, False), ("k2", 2, 0.878, False), ("k2", 3, 0.85, True)]
    assert samples == [2, 2, 2, 2] and environment == {"hardware": "H200", "torch": "2.11"}
    pod.dispose()
    home.dispose()


def removes_whole_runs_and_nothing_else(url: str) -> None:
    """`ckpt-sweep rm`: the runs named go whole (every attempt, its step samples, a claim its writer
    left) in one transaction; another run keeps every row; an unknown id, or a run whose cell a
    writer is measuring now, removes nothing, in one line; without a terminal it asks for --yes."""
    engine = store.open_store(url)
    old = store.get_or_create_run(engine, "families-tiny", "CPU: AMD EPYC")
    for attempt in range(2):  # two attempts of one cell
        store.record_cell(engine, old, CELL, "k1", big_result(sec_per_step=1.0 + attempt))
    store.record_cell(engine, old, {**CELL, "mode": "none"}, "k2", big_result())
    store.claim_cell(engine, old, "k3", 60, owner="gone-host:1")
    store.release_claim(engine, old, "k3", owner="gone-host:1")
    store.claim_cell(engine, old, "k3", -1, owner="gone-host:1")  # expired: its writer stopped
    kept = store.get_or_create_run(engine, "packed-latents", "H200")
    store.record_cell(engine, kept, CELL, "k1", big_result())
    counts = "select (select count(*) from runs), (select count(*) from cells), (select count(*) from samples)"
    before = rows_of(engine, counts)
    assert before == [(2, 4, 8)]

    refused = run_cli(["rm", str(old), "999", "--yes", "--db", url])
    assert refused.returncode == 1 and refused.stderr.strip().splitlines() == [
        "ckpt-sweep: nothing removed: no run 999 here (`ckpt-sweep runs` lists them)"
    ]
    unconfirmed = run_cli(["rm", str(old), "--db", url])  # pytest's stdin is no terminal
    assert unconfirmed.returncode == 1 and "pass --yes" in unconfirmed.stderr
    assert f"run {old}: families-tiny (CPU: AMD EPYC, measured), 3 cell attempt(s)" in unconfirmed.stdout
    store.claim_cell(engine, old, "k4", 600)  # this process measures a cell of it now
    busy = run_cli(["rm", str(old), "--yes", "--db", url])
    assert busy.returncode == 1 and f"run {old} has a cell being measured now (by {store.writer()})" in busy.stderr
    assert rows_of(engine, counts) == before
    store.release_claim(engine, old, "k4")

    removed = run_cli(["rm", str(old), str(old), "--yes", "--db", url])
    assert removed.returncode == 0, removed.stderr
    assert f"removed run {old}: 3 cell attempt(s), 6 step sample(s)" in removed.stdout
    assert rows_of(engine, counts) == [(1, 1, 2)]
    assert rows_of(engine, "select count(*) from claims") == [(0,)]
    [cell] = load_cells(engine, select_runs(engine)).to_dict("records")
    assert (cell["run_id"], cell["peak_bytes"]) == (kept, 80 * GIB)
    engine.dispose()


def rows_of(engine, query: str) -> list[tuple]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(query))]


def test_removing_runs_takes_them_whole_and_leaves_the_rest_at_80_gib(tmp_path):
    removes_whole_runs_and_nothing_else(f"sqlite:///{tmp_path / 'results.db'}")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_removing_asks_on_a_terminal_and_an_answer_other_than_yes_keeps_the_run(tmp_path, monkeypatch):
    db = tmp_path / "results.db"
    engine = store.open_store(str(db))
    run = store.get_or_create_run(engine, "trial", "CPU")
    store.record_cell(engine, run, CELL, "k1", big_result())
    monkeypatch.setattr(sys, "stdin", Terminal())
    asked = []

    def answering(answer):
        def ask(question):
            asked.append(question)
            if isinstance(answer, type):
                raise answer
            return answer

        return ask

    for answer, code in (("n", 1), ("", 1), (EOFError, 1), (KeyboardInterrupt, 1), ("y", 0)):
        monkeypatch.setattr("builtins.input", answering(answer))
        done = run_cli(["rm", str(run), "--db", str(db)])
        assert done.returncode == code, done.stderr
        assert rows_of(engine, "select count(*) from runs") == [(int(code == 1),)]
    assert asked == ["remove this run? [y/N] "] * 5
    engine.dispose()


def test_merging_a_pods_sqlite_database_is_idempotent_at_80_gib(tmp_path):
    merges_a_pods_runs_once_keeping_the_latest_attempt_current(f"sqlite:///{tmp_path / 'home.db'}", tmp_path)


def test_merge_refuses_its_own_database_and_a_missing_one_in_one_line(tmp_path):
    home = tmp_path / "home.db"
    store.open_store(str(home)).dispose()
    for source, message in ((home, "is the database merged into"), (tmp_path / "nope.db", "no database at")):
        done = run_cli(["merge", str(source), "--db", str(home)])
        assert done.returncode == 1 and message in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
