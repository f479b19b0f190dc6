"""Run sweeps as a user would: the `ckpt-sweep run` command in this process (the test worker's
fork server serves every sweep it runs, as one long-lived process would), or the console script in
a subprocess of its own where a test is about the process itself (signals, its environment)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parent
# Full training: a sweep's fork server preloads PEFT only for LoRA cells (about 5 s of CPU in each
# sweep that runs in a process of its own); the tests that are about LoRA name it.
FAST = ["measure.warmup_steps=1", "measure.steps=2", "training=full"]


def sweep_env(extra: dict | None = None) -> dict:
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), env.get("PYTHONPATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def sweep_args(db: Path, *overrides: str, db_url: str | None = "sqlite") -> list[str]:
    """The console script's command; `db_url=None` leaves the database to CKPT_SWEEP_DB_URL."""
    return [
        sys.executable,
        "-m",
        "sweep.cli",
        "run",
        *([f"db.url=sqlite:///{db}"] if db_url else []),
        f"hydra.sweep.dir={db.parent}/multirun",
        f"hydra.searchpath=[file://{SUPPORT / 'conf'}]",
        *overrides,
    ]


def run_sweep(
    db: Path,
    *overrides: str,
    timeout: float = 300,
    extra_env: dict | None = None,
    own_process: bool = False,
    db_url: str | None = "sqlite",
) -> subprocess.CompletedProcess:
    """`ckpt-sweep run` into `db`: in this process, or in a process of its own (`own_process`, or
    whenever the sweep needs an environment of its own, or a launcher other than the local one:
    Ray or submitit must not stay behind in a test worker)."""
    elsewhere = any(o.startswith("launcher=") and o != "launcher=local" for o in overrides)
    if own_process or extra_env or elsewhere:
        return subprocess.run(
            sweep_args(db, *overrides, db_url=db_url),
            capture_output=True,
            text=True,
            env=sweep_env(extra_env),
            cwd=ROOT,
            timeout=timeout,
        )
    return run_cli(["run", *sweep_args(db, *overrides, db_url=db_url)[4:]])


def run_cli(argv: list[str]) -> subprocess.CompletedProcess:
    """`ckpt-sweep ARGV` in this process: its exit status and what it printed."""
    from sweep import cli

    out, err, argv_before, code = io.StringIO(), io.StringIO(), sys.argv, 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(argv)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
            if isinstance(exit.code, str):
                print(exit.code, file=sys.stderr)
        finally:
            sys.argv = argv_before
    return subprocess.CompletedProcess(["ckpt-sweep", *argv], code, out.getvalue(), err.getvalue())


def start_sweep(db: Path, *overrides: str, extra_env: dict | None = None) -> subprocess.Popen:
    """The sweep in a session of its own, so a test can see that nothing of it is left behind."""
    return subprocess.Popen(
        sweep_args(db, *overrides),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sweep_env(extra_env),
        cwd=ROOT,
        start_new_session=True,
        # as from a terminal: an xdist worker may ignore SIGINT, and a child would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def session_processes(session: int | str) -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of the processes still alive in a session (`ps`). A zombie is
    not alive, nor is a process `ps` shows as `[python3]`: its command line is gone with its memory,
    so it is in the middle of exiting (the multiprocessing resource tracker ends when the sweep that
    started it has, and nobody waits for it; a Ray process just stopped, likewise)."""
    listing = subprocess.run(
        ["ps", "-e", "-ww", "-o", "sid=,pid=,ppid=,stat=,args="], capture_output=True, text=True
    ).stdout
    rows = [line.split(maxsplit=4) for line in listing.splitlines()]
    return [
        (int(pid), int(ppid), args)
        for sid, pid, ppid, stat, args in (row for row in rows if len(row) == 5)
        if sid == str(session) and not stat.startswith("Z") and not (args.startswith("[") and args.endswith("]"))
    ]


def claimed(db: Path) -> bool:
    """Some cell of the SQLite file is being measured now: its claim is taken, after every question
    the sweep asks its fork server's children (sweep/run/app.py), so the server's child is the cell."""
    try:
        return bool(query(db, "select count(*) from claims")[0][0])
    except OperationalError:  # no tables yet
        return False


def query(db: Path, sql: str) -> list[tuple]:
    engine = create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql))]
    finally:
        engine.dispose()
