"""The sweep harness end to end, through the real console script."""

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from sqlalchemy.exc import OperationalError

from sweep.config.cell import Cell
from sweep.run.app import should_run
from tests.support.sweeps import (
    FAST,
    ROOT,
    SUPPORT,
    claimed,
    query,
    run_sweep,
    session_processes,
    start_sweep,
    sweep_args,
    sweep_env,
)

FAULTS = {
    "ok": "ok",
    "oom": "oom",
    "segfault": "crashed",
    "hang": "timeout",
    "raise": "failed",
    "unsupported": "unsupported",
    "exit": "crashed",
    "sys-exit": "failed",
}


def recorded_cells(db) -> int:
    """Cells in the database so far; 0 while the sweep has not created it (or its tables) yet."""
    try:
        return query(db, "select count(*) from cells")[0][0] if db.exists() else 0
    except OperationalError:  # the file exists a moment before its tables do
        return 0


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.mark.long
def test_multirun_creates_exactly_the_cartesian_product(tmp_path):
    db = tmp_path / "r.db"
    done = run_sweep(
        db, "sweep=none", "family=synthetic,faulty", "preset=tiny,tiny-odd", "mode=none,layer,unsloth", *FAST
    )
    # the faulty family has no presets named tiny/tiny-odd: the sweep refuses before running anything
    assert done.returncode != 0
    assert "family faulty: unknown preset 'tiny'" in done.stderr and "valid presets:" in done.stderr
    assert not db.exists() or query(db, "select count(*) from cells") == [(0,)]

    done = run_sweep(
        db, "sweep=none", "family=synthetic,faulty", "mode=none,layer,unsloth", "+shape.tokens=16,24", *FAST
    )
    assert done.returncode == 0, done.stderr
    rows = query(db, "select family, preset, mode, tokens, status from cells")
    assert len(rows) == 2 * 3 * 2
    assert {(f, m, t) for f, _, m, t, _ in rows} == {
        (f, m, t) for f in ("synthetic", "faulty") for m in ("none", "layer", "unsloth") for t in (16, 24)
    }
    assert {s for *_, s in rows} == {"ok"}


def test_the_driver_composes_each_jobs_config_once(tmp_path, monkeypatch):
    """The preflight, Hydra's sweeper (validating the batch) and its launcher each ask for every
    job's config; composing one takes about 0.1 s on two cores, most of a tiny cell's cost in the
    driver (sweep/run/compose_once.py)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    composed, compose = [], ConfigLoaderImpl.load_sweep_config
    monkeypatch.setattr(
        ConfigLoaderImpl,
        "load_sweep_config",
        lambda loader, master, overrides: composed.append(tuple(overrides)) or compose(loader, master, overrides),
    )
    done = run_sweep(tmp_path / "r.db", "sweep=none", "preset=tiny", "mode=none,layer", "+shape.tokens=16,24", *FAST)
    assert done.returncode == 0, done.stderr[-2000:]
    assert query(tmp_path / "r.db", "select count(*) from cells where status = 'ok'") == [(4,)]
    assert len(composed) == len(set(composed)) == 4, composed


@pytest.mark.long
def test_every_fault_gets_its_status_and_a_rerun_executes_nothing(tmp_path):
    """Only the hanging cell gets a short timeout: the others keep the default, however busy the machine."""
    db = tmp_path / "r.db"
    others = [
        "sweep=none",
        "family=faulty",
        f"preset={','.join(p for p in FAULTS if p != 'hang')}",
        "mode=layer,bad-stride",
        *FAST,
    ]
    hang = ["sweep=none", "family=faulty", "preset=hang", "mode=layer,bad-stride", "measure.timeout_s=4", *FAST]
    for overrides in (others, hang):
        done = run_sweep(db, *overrides)
        assert done.returncode == 0, done.stderr
    rows = {(p, m): (s, r) for p, m, s, r in query(db, "select preset, mode, status, reason from cells")}
    assert len(rows) == 2 * len(FAULTS)
    for preset, status in FAULTS.items():
        assert rows[(preset, "layer")][0] == status, (preset, rows[(preset, "layer")])
        assert rows[(preset, "bad-stride")] == (
            "invalid",
            "segment stride must be at least the checkpointing interval (stride 2 < interval 4)",
        )
    # NOTE [ Where a cell died ]: the line of tests/support/faulty.py each fault ran
    source = (SUPPORT / "faulty.py").read_text().splitlines()
    segfault, sleep = (
        1 + source.index(line) for line in ("            ctypes.string_at(0)", "            time.sleep(3600)")
    )
    assert rows[("segfault", "layer")][1] == (
        f"child died by SIGSEGV before reporting, while in support/faulty.py line {segfault} (__call__)"
    )
    assert (
        rows[("hang", "layer")][1]
        == f"no result within 4 s; child stopped, while in support/faulty.py line {sleep} (__call__)"
    )
    [(dump,)] = query(db, "select traceback from cells where preset='segfault' and mode='layer'")
    assert "Fatal Python error: Segmentation fault" in dump and "in faulty_step" in dump
    assert "Extension modules" not in dump
    assert "injected failure" in rows[("raise", "layer")][1]
    assert "exited with code 3" in rows[("exit", "layer")][1]
    assert rows[("sys-exit", "layer")][1] == "SystemExit: the model's weights are missing (injected)"
    [(traceback,)] = query(db, "select traceback from cells where preset='raise' and mode='layer'")
    assert "RuntimeError: injected failure" in traceback
    [(traceback,)] = query(db, "select traceback from cells where preset='sys-exit' and mode='layer'")
    assert 'faulty.py", line' in traceback and traceback.rstrip().endswith(
        "SystemExit: the model's weights are missing (injected)"
    )
    [(sec, peak, n_measured, n_warmup, steps, warmup, loss)] = query(
        db,
        """select sec_per_step, peak_bytes,
        (select count(*) from samples s where s.cell_id=c.id and not warmup),
        (select count(*) from samples s where s.cell_id=c.id and warmup), steps, warmup_steps, final_loss
        from cells c where preset='ok' and mode='layer'""",
    )
    assert sec > 0 and peak > 0 and (n_measured, n_warmup) == (2, 1) == (steps, warmup) and loss > 0
    [(environment, hardware)] = query(db, "select environment, hardware from runs")
    environment = json.loads(environment)
    for field in ("hardware", "hostname", "versions", "git_commit", "git_dirty", "PYTORCH_CUDA_ALLOC_CONF", "cpu"):
        assert field in environment
    assert hardware.startswith("CPU: ") and environment["versions"]["torch"]
    [(versions, timings)] = query(db, "select versions, timings from cells where preset='ok' and mode='layer'")
    assert json.loads(versions)["packages"]["torch"] and {"build_s", "child_s", "wall_s"} <= set(json.loads(timings))
    assert query(db, "select count(*) from cells where breakdown = 'null' or report = 'null'") == [(0,)]

    recorded = query(db, "select cell_key, recorded_at from cells order by cell_key")
    again = run_sweep(db, *others)
    assert again.returncode == 0, again.stderr
    assert all(line["skipped"] for line in json_lines(again.stdout))
    assert query(db, "select cell_key, recorded_at from cells order by cell_key") == recorded

    retried = run_sweep(db, *others, "run.rerun=failed")  # (a timeout is retried the same way: RETRYABLE)
    ran = {line["preset"] for line in json_lines(retried.stdout) if not line["skipped"]}
    assert ran == {"raise", "segfault", "exit", "sys-exit"}
    # the earlier attempts stay; only the latest is current
    assert query(db, "select count(*), sum(is_current) from cells where preset = 'raise' and mode = 'layer'") == [
        (2, 1)
    ]


@pytest.mark.long
def test_sweeps_writing_one_file_at_once_lose_no_rows_and_measure_a_shared_cell_once(tmp_path):
    """Three sweeps start at once on one SQLite file: the rows of each run all land, and the two
    given the same run (each reads it empty) split its cells instead of both measuring every one
    (NOTE [ One writer per cell ])."""
    db = tmp_path / "r.db"
    common = ["sweep=none", "family=faulty", "preset=slow", "+shape.tokens=8,12,16,20", *FAST]
    names = ["run.name=shared", "run.name=shared", "run.name=other"]
    sweeps = [start_sweep(db, *common, name) for name in names]
    outputs = [sweep.communicate(timeout=600) for sweep in sweeps]
    assert [sweep.returncode for sweep in sweeps] == [0, 0, 0], outputs
    assert query(
        db,
        "select r.name, count(*), count(distinct cell_key), sum(is_current) from cells c join runs r "
        "on r.id = c.run_id group by r.name order by r.name",
    ) == [("other", 4, 4, 4), ("shared", 4, 4, 4)]
    assert query(db, "select count(*) from samples") == [(8 * 3,)]
    assert query(db, "select count(*) from claims") == [(0,)]
    shared = [line for out, _ in outputs[:2] for line in json_lines(out)]
    assert sorted(line["key"] for line in shared if not line["skipped"]) == sorted(
        key
        for (key,) in query(db, "select cell_key from cells c join runs r on r.id = c.run_id where r.name = 'shared'")
    ), shared


def test_a_second_sigterm_in_the_claims_release_still_ends_the_sweep_stopped(tmp_path):
    """SLURM sends SIGTERM more than once: one that lands in the query giving the interrupted cell's
    claim back made the database driver's cleanup raise its own error (psycopg: "can't change
    'autocommit' now"), and the job ended failed instead of stopped. The release holds signals and
    a failed release is not the job's outcome: the sweep exits 143, saying it was stopped."""
    script = """
import os, signal, sys
from sqlalchemy.exc import ProgrammingError
from sweep import cli
from sweep.run import app, interruption

def interrupted(*args):  # SIGTERM while the cell runs: the handler raises Terminated here
    os.kill(os.getpid(), signal.SIGTERM)

def release(*args):  # as psycopg's cleanup does when a signal lands in its query
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except interruption.Terminated:
        raise ProgrammingError("DELETE FROM claims", {}, Exception("can't change 'autocommit' now")) from None

app.measured, app.store.release_claim = interrupted, release
cli.main(sys.argv[1:])
"""
    args = sweep_args(tmp_path / "r.db", "sweep=none", "preset=tiny", "mode=none", *FAST)[3:]
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=sweep_env(), cwd=ROOT, timeout=300
    )
    assert done.returncode == 143, done.stderr[-2000:]
    assert "ProgrammingError" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.long
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_sweep_stops_cleanly_and_resumes_without_duplicates(tmp_path, signum, code):
    db = tmp_path / "r.db"
    overrides = [
        "sweep=none",
        "family=faulty",
        "preset=slow",
        "+shape.tokens=8,12,16,20",
        *FAST,
        "measure.steps=3",
    ]
    process = start_sweep(db, *overrides)
    for line in process.stdout:  # each finished cell is a JSON line (not a terminal): wait for the first
        if line.startswith("{"):
            break
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr[-2000:]
    partial = query(db, "select count(*) from cells")[0][0]
    assert 1 <= partial < 4
    last = stderr.strip().splitlines()[-1]
    # a cell running at the signal (most often) is named with where it was; between cells, none is
    running = r"(; faulty/slow tokens=\d+ none q=none full was running, in \S+\.py line \d+ \(\w+\))?"
    assert re.fullmatch(
        rf"ckpt-sweep: interrupted after {partial} of 4 cells{running}; run the same command again to resume", last
    ), last
    assert "Traceback" not in stderr
    assert session_processes(process.pid) == []  # no child, no fork server
    done = run_sweep(db, *overrides)
    assert done.returncode == 0, done.stderr
    lines = json_lines(done.stdout)
    assert sum(not line["skipped"] for line in lines) == 4 - partial
    assert query(db, "select count(*), count(distinct cell_key) from cells") == [(4, 4)]
    assert query(db, "select count(*) from runs") == [(1,)]


@pytest.mark.long
def test_a_killed_sweep_leaves_no_cell_running(tmp_path):
    """kill -9: no handler runs, yet the fork server and its hanging cell die with it
    (isolation.die_with_parent) instead of holding the device for an hour, and the file the cell
    would have written its stack into leaves nothing behind (stacks.StackFile). Under a TMPDIR too
    long for the fork server's socket, as a SLURM job's often is (NOTE [ A socket under a long TMPDIR ])."""
    from sweep.run import isolation

    db, temporary = tmp_path / "r.db", tmp_path / "job".ljust(max(4, 90 - len(str(tmp_path))), "-")
    temporary.mkdir()
    assert len(str(temporary)) + isolation.SOCKET_SUFFIX > isolation.SOCKET_PATH_MAX
    process = start_sweep(db, "sweep=none", "family=faulty", "preset=hang", *FAST, extra_env={"TMPDIR": str(temporary)})
    deadline = time.time() + 120
    while not (claimed(db) and sum("forkserver" in args for *_, args in session_processes(process.pid)) >= 2):
        assert process.poll() is None and time.time() < deadline, session_processes(
            process.pid
        )  # the server and its cell
        time.sleep(0.2)
    process.kill()
    process.wait()  # not communicate(): a surviving cell would hold its pipes open
    deadline = time.time() + 60
    while session_processes(process.pid) and time.time() < deadline:
        time.sleep(0.2)
    assert session_processes(process.pid) == []
    assert list(temporary.iterdir()) == []  # multiprocessing's own folder is in the system's /tmp


@pytest.mark.parametrize(
    "overrides, messages",
    [
        (
            ["mode=none,bogus"],
            ["mode=none,bogus: unknown value 'bogus'; valid: activation-offload, bad-stride, interval2, layer"],
        ),
        (["db.url=sqlite:/one-slash.db"], ["malformed database URL 'sqlite:/one-slash.db'"]),
        # the typed config: Hydra itself refuses a wrong type; a word outside an enum, one line of ours
        (["measure.steps=abc"], ["measure.steps=abc", "Value 'abc' of type 'str' could not be converted to Integer"]),
        (["training=sideways"], ["training=sideways: unknown value 'sideways'; valid: lora, frozen, full"]),
        (["run.rerun=sometimes"], ["run.rerun=sometimes: unknown value 'sometimes'; valid: none, failed, all"]),
        (["no_such_key=1"], ["Key 'no_such_key' not in 'SweepConfig'"]),
        (
            ["+mode.intervall=3"],
            [
                "+mode.intervall: not a mode setting; a mode has name, backend, interval, stride, regions, blocks, "
                "offload_attention, offload_attention_in_regions, ffn_scope, "
                "attention_offload_scope"
            ],
        ),
        # every problem the validator finds is listed at once
        (
            ["device=cuda", "measure.steps=0", "measure.warmup_steps=-1", "measure.timeout_s=0"],
            [
                "device=cuda, but",
                "measure.steps must be at least 1 (a measured step), got 0",
                "measure.warmup_steps must be 0 or more, got -1",
                "measure.timeout_s must be a positive number of seconds, got 0",
            ],
        ),
        (["family._target_=nowhere.build"], ["cannot import builder 'nowhere.build'"]),
        (
            ["family._target_=broken_builder.build"],
            [
                "cannot import builder 'broken_builder.build' (ZeroDivisionError: the "
                "builder's module divided by zero at import (injected))"
            ],
        ),
        (["family._target_=not_a_builder.build"], ["builder 'not_a_builder.build' is a int, not a function"]),
    ],
)
def test_bad_input_is_named_before_anything_runs(tmp_path, overrides, messages):
    db = tmp_path / "r.db"
    done = run_sweep(db, "sweep=none", "family=faulty", "preset=ok", "mode=none", *FAST, *overrides)
    assert done.returncode != 0
    for message in messages:
        assert message in done.stderr, (message, done.stderr[-2000:])
    assert not db.exists()


def test_unreadable_database_is_refused_and_left_untouched(tmp_path):
    db = tmp_path / "r.db"
    db.write_bytes(b"this is not a database" * 100)
    before = db.read_bytes()
    done = run_sweep(db, "sweep=none", "family=faulty", "preset=ok", "mode=none", *FAST)
    assert done.returncode != 0
    assert "cannot open database" in done.stderr and "not a database" in done.stderr
    assert db.read_bytes() == before


@pytest.mark.long
def test_a_change_of_measure_settings_is_said_and_rerun_keeps_the_earlier_attempt(tmp_path):
    db = tmp_path / "r.db"
    cells = ["sweep=none", "family=faulty", "preset=ok", "mode=none,layer", "training=lora"]
    assert run_sweep(db, *cells, "measure.warmup_steps=1", "measure.steps=2").returncode == 0
    again = run_sweep(db, *cells, "measure.warmup_steps=1", "measure.steps=3")
    assert again.returncode == 0 and all(line["skipped"] for line in json_lines(again.stdout))
    assert (
        "2 cell(s) recorded with steps=2, warmup_steps=1 (this sweep asks for steps=3, warmup_steps=1): "
        "run.rerun=all measures them again, keeping the earlier attempt"
    ) in again.stderr
    rerun = run_sweep(db, *cells, "measure.warmup_steps=1", "measure.steps=3", "run.rerun=all")
    assert rerun.returncode == 0, rerun.stderr
    assert query(db, "select mode, attempt, is_current, steps from cells order by mode, attempt") == [
        ("layer", 1, 0, 2),
        ("layer", 2, 1, 3),
        ("none", 1, 0, 2),
        ("none", 2, 1, 3),
    ]
    assert query(db, "select count(*) from samples") == [(2 * (3 + 4),)]  # every attempt keeps its samples
    from sweep.report.diff import diff_runs
    from sweep.store.database import open_store

    engine = open_store(f"sqlite:///{db}")
    result = diff_runs(engine, "1@previous", "1")
    assert len(result.cells) == 2 and result.label_a.endswith("@previous")
    assert set(result.cells["ratio"].round(6) > 0) == {True}
    engine.dispose()


def test_a_cell_fingerprinted_by_the_earlier_scheme_is_compared_by_it(tmp_path):
    """NOTE [ Fingerprint schemes ]: a cell recorded before fingerprints left out the adapters is
    skipped while its model is unchanged, measured again once it changed; the new attempt records
    the new scheme."""
    from sweep.config.builders import FINGERPRINT_PREFIX, fingerprint

    db = tmp_path / "r.db"
    cell = ["sweep=none", "family=faulty", "preset=ok", "mode=none", *FAST]
    assert run_sweep(db, *cell).returncode == 0
    [(config, model)] = query(db, "select config, json_extract(versions, '$.model') from cells")
    assert model.startswith(FINGERPRINT_PREFIX)
    c = json.loads(config)
    legacy = fingerprint(
        c["builder"], c["preset"], json.dumps(c["shape"]), c["training"], c["lora_rank"], c["quantization"], legacy=True
    )
    assert legacy != model and not legacy.startswith(FINGERPRINT_PREFIX)

    def recorded_as(value: str) -> None:
        with sqlite3.connect(db) as connection:
            connection.execute("update cells set versions = json_set(versions, '$.model', ?)", (value,))

    recorded_as(legacy)
    unchanged = run_sweep(db, *cell)
    assert unchanged.returncode == 0 and all(line["skipped"] for line in json_lines(unchanged.stdout))
    recorded_as("0123456789ab")  # a model of another shape, by the earlier scheme
    edited = run_sweep(db, *cell)
    assert "1 cell(s) measured again: the model its builder builds changed" in edited.stderr, edited.stderr
    assert query(db, "select attempt, json_extract(versions, '$.model') from cells where is_current") == [(2, model)]


def test_cell_identity_ignores_the_label_and_rerun_rules():
    a = Cell(family="f", builder="m.b", preset="p", mode="layer", backend="torch")
    b = Cell(family="f", builder="m.b", preset="p", mode="renamed", backend="torch")
    c = Cell(family="f", builder="m.b", preset="p", mode="layer", backend="torch", interval=2)
    assert a.key == b.key != c.key
    assert should_run(None, "none") and not should_run("ok", "none") and not should_run("failed", "none")
    assert should_run("timeout", "failed") and not should_run("oom", "failed") and should_run("ok", "all")


def test_a_sweep_whose_every_cell_failed_exits_non_zero_and_says_how_to_rerun(tmp_path):
    """A failed cell is an error of the run (an oom or unsupported one is a result): when every cell
    failed, the exit status says so; running it again skips them and says how to measure them again."""
    db = tmp_path / "r.db"
    failing = ["sweep=none", "family=faulty", "preset=raise", "mode=none,layer", *FAST]
    done = run_sweep(db, *failing)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "ckpt-sweep: every cell of this sweep ended failed; the same command with run.rerun=failed measures them again"
    )
    again = run_sweep(db, *failing)
    assert again.returncode == 0 and all(line["skipped"] for line in json_lines(again.stdout))
    assert "2 cell(s) skipped, recorded failed earlier: run.rerun=failed measures them again" in again.stderr
    mixed = run_sweep(db, "sweep=none", "family=faulty", "preset=raise,ok", "mode=none", *FAST, "run.rerun=failed")
    assert mixed.returncode == 0, mixed.stderr[-2000:]


def test_ad_hoc_sweeps_of_unrelated_models_do_not_share_a_run(tmp_path):
    db = tmp_path / "r.db"
    for family, preset in (("faulty", "ok"), ("synthetic", "tiny")):
        done = run_sweep(db, "sweep=none", f"family={family}", f"preset={preset}", "mode=none", *FAST)
        assert done.returncode == 0, done.stderr[-2000:]
    assert query(db, "select name from runs order by name") == [("faulty-full",), ("synthetic-full",)]
    named = run_sweep(db, "sweep=cpu-demo", "preset=tiny", "mode=none", *FAST)
    assert named.returncode == 0 and ("cpu-demo",) in query(db, "select name from runs"), named.stderr[-2000:]


def test_the_fork_server_starts_on_the_first_jobs_builder_before_any_cell_runs(tmp_path, monkeypatch):
    """Hydra's own launcher runs the cells in this process's children: the fork server's preload starts
    while the driver is still composing, on the first job's builder module, once."""
    from sweep.run import app, isolation

    events = []
    start, run_isolated = isolation.start_fork_server, app.run_isolated
    monkeypatch.setattr(isolation, "start_fork_server", lambda *needs: events.append(needs) or start(*needs))
    monkeypatch.setattr(app, "run_isolated", lambda *a, **k: events.append("cell") or run_isolated(*a, **k))
    done = run_sweep(tmp_path / "r.db", "sweep=none", "preset=tiny", "mode=none,layer", *FAST)
    assert done.returncode == 0, done.stderr
    assert events == [("ckptlib.synthetic", {"full"}), "cell", "cell"]


def test_a_sweep_that_skips_every_cell_leaves_its_run_as_its_cells_left_it(tmp_path, monkeypatch):
    """NOTE [ A run is written when a cell is ]: run again with nothing to measure, a sweep neither
    refreshes its run's environment and config nor asks what a run records of torch (of the fork
    server's children, in a process without torch)."""
    from sweep.run import app

    db, cells = tmp_path / "r.db", ["sweep=none", "preset=tiny", "mode=none,layer", *FAST]
    assert run_sweep(db, *cells).returncode == 0
    before = query(db, "select id, environment, config from runs")
    asked = []
    monkeypatch.setattr(app, "answered_with_torch", lambda *args, **kwargs: asked.append(args))
    again = run_sweep(db, *cells, "measure.timeout_s=999")
    assert again.returncode == 0 and again.stdout.count('"skipped": true') == 2, again.stdout
    assert query(db, "select id, environment, config from runs") == before and asked == []


def test_what_the_fork_server_preloads_is_the_sweeps_before_a_child_checks_a_builder_of_ones_own(tmp_path, monkeypatch):
    """NOTE [ A sweep's own process imports no torch ]: in a process without torch, validation asks
    the fork server's children to build a builder of one's own (tests/sweep/test_layout.py), so the
    server's preload (PEFT for any job training LoRA) is said for the whole sweep before validation,
    not by the first job's training alone when the first question comes."""
    from sweep.run import isolation

    calls, fork_server = [], isolation.fork_server
    monkeypatch.setattr(isolation, "fork_server", lambda *needs: calls.append(needs) or fork_server(*needs))
    done = run_sweep(
        tmp_path / "r.db", "sweep=none", "family=faulty", "preset=ok", "mode=none", "training=full,lora",
        "measure.warmup_steps=0", "measure.steps=1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert calls[0] == ("faulty", {"full", "lora"}), calls
    assert {status for (status,) in query(tmp_path / "r.db", "select status from cells")} == {"ok"}
