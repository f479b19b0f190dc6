"""A PostgreSQL server for the tests that need one: CKPT_SWEEP_POSTGRES_URL (.ci/run sets it), else a
server scripts/postgres.sh can start here, else the tests skip and say why. Each test gets a fresh
database, dropped afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

INSUFFICIENT_PRIVILEGE = "42501"

ROOT = Path(__file__).resolve().parents[2]


def postgres_reason() -> str | None:
    if os.environ.get("CKPT_SWEEP_POSTGRES_URL"):
        return None
    started = shutil.which("pg_ctlcluster") and subprocess.run(
        [str(ROOT / "scripts" / "postgres.sh"), "start"], capture_output=True, text=True
    )
    if started and started.returncode == 0:
        os.environ["CKPT_SWEEP_POSTGRES_URL"] = started.stdout.strip()
        return None
    return (
        "no PostgreSQL server: CKPT_SWEEP_POSTGRES_URL is unset and none could be started here "
        "(scripts/postgres.sh start installs and starts one; .ci/run does)"
    )


def admin(statement: str) -> None:
    engine = create_engine(os.environ["CKPT_SWEEP_POSTGRES_URL"], isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(statement))
    engine.dispose()


def create_database() -> tuple[str, str]:
    name = f"test_{uuid.uuid4().hex[:12]}"
    admin(f"CREATE DATABASE {name}")
    return name, os.environ["CKPT_SWEEP_POSTGRES_URL"].rsplit("/", 1)[0] + f"/{name}"


def drop_database(name: str) -> None:
    """FORCE ends what a test left connected. It refuses, as a role without pg_signal_backend, when an
    autovacuum worker (a process of no role) is in the database at that moment; a plain DROP then
    ends that worker itself (PostgreSQL's CountOtherDBBackends)."""
    try:
        admin(f"DROP DATABASE {name} WITH (FORCE)")
    except DBAPIError as error:
        if getattr(error.orig, "sqlstate", None) != INSUFFICIENT_PRIVILEGE:
            raise
        admin(f"DROP DATABASE {name}")


def rows(url: str, sql: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(r) for r in connection.execute(text(sql))]
    finally:
        engine.dispose()
