"""The results database: opening it safely, and every write the harness makes.

SQLite gets WAL, a busy timeout and BEGIN IMMEDIATE transactions, so several sweeps (or launcher
workers) writing one file serialise instead of failing or losing rows. Each cell is written in
one transaction: an interrupted sweep leaves only whole cells behind. A write that loses its
PostgreSQL connection (a server restart) reconnects and tries again; nothing is half-written.
"""

from __future__ import annotations

import atexit
import datetime as dt
import os
import re
import socket
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from weakref import WeakSet

from sqlalchemy import create_engine, delete, event, func, select, update
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    DBAPIError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
)
from sqlalchemy.orm import Session

from sweep.config.builders import SHAPE_COLUMNS
from sweep.config.cell import COLUMNS
from sweep.vocabulary import Provenance

from .migrations import SchemaTooNew, schema_version, upgrade
from .results import CellResult, throughput
from .schema import SCHEMA_VERSION, CellRow, Claim, Run, Sample, now

SCHEMA_LOCK_ID = 0x636B7074  # "ckpt": the advisory lock schema changes take on PostgreSQL
RECONNECT_DELAYS_S = (0.5, 1, 2, 4, 8, 15)  # about 30 s: long enough for a server restart
T = TypeVar("T")
URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # `sqlite:`, `postgresql+psycopg:`: a URL, not a path
__all__ = ["CellRow", "Run", "Sample", "StoreError", "now", "open_store"]


class StoreError(RuntimeError):
    """The database URL or file cannot be used; nothing was written."""


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None  # let BEGIN below be the transaction
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout = 60000")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def begin(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")


NETWORK_FILESYSTEMS = {
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "lustre",
    "gpfs",
    "beegfs",
    "ceph",
    "glusterfs",
    "fuse.sshfs",
    "fuse.glusterfs",
    "9p",
    "afs",
}


def filesystem_of(path: Path, mounts: str | None = None) -> tuple[str, str]:
    """(mount point, file system type) holding `path`, from /proc/mounts; ("", "") where unknown."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return "", ""
    best = ("", "")
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        inside = str(path) == mount or str(path).startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best[0]):
            best = (mount, fields[2])
    return best


def _check_sqlite_file(path: Path, create: bool) -> None:
    """Before SQLAlchemy touches the file: it exists (or may be created), is a file on a local
    disk, and passes SQLite's own consistency check."""
    if path.exists() and not path.is_file():
        raise StoreError(f"database path {path} is not a file")
    if not path.exists():
        if not create:
            raise StoreError(f"no database at {path} (check the path, or record a sweep there first)")
        if not path.parent.exists():
            raise StoreError(f"database directory {path.parent} does not exist")
    mount, kind = filesystem_of(path.resolve())
    if kind in NETWORK_FILESYSTEMS:
        raise StoreError(
            f"database {path} is on a network file system ({kind} at {mount}): SQLite's locking is "
            f"not safe there and rows from parallel cells can be lost; use a PostgreSQL URL "
            f"(db.url=postgresql+psycopg://user:password@host/database)"
        )
    if path.exists() and path.stat().st_size:
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
                verdict = [line for (row,) in connection.execute("PRAGMA quick_check") for line in row.splitlines()]
        except sqlite3.DatabaseError as error:
            raise StoreError(f"cannot open database {path}: {error}") from None
        if verdict != ["ok"]:
            detail = next((line for line in verdict if not line.startswith("***")), verdict[0])
            raise StoreError(f"database {path} is damaged (PRAGMA quick_check: {detail}); nothing was written to it")


def _sqlite_file(parsed) -> Path | None:
    """The database file of a parsed SQLite URL (None: another backend, or in memory)."""
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return Path(parsed.database)
    return None


def database_url(text: str) -> str:
    """`text` as a database URL: a URL as it is; a plain file path (`results.db`, `~/runs/r.db`,
    anything without a `scheme:` in front) is that SQLite file, made absolute so that every
    process of a sweep opens the same one."""
    if URL_SCHEME.match(text):
        return text
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def redacted(url: str) -> str:
    """`url` as it may be stored or shown: its password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


# NOTE [ Engines close at exit ]: SQLite in WAL mode folds its log back into the file when the last
# connection closes. The console script leaves without the interpreter's teardown (NOTE [ Leaving
# fast ] in sweep/cli.py), which is where an engine still open used to close its connections; so
# every engine opened here is disposed by an exit handler, and results.db is whole, with no -wal file
# beside it that a copy of the database alone would miss.
_opened: WeakSet[Engine] = WeakSet()


@atexit.register
def _dispose_opened() -> None:
    for engine in list(_opened):
        engine.dispose()


def _engine(*args, **kwargs) -> Engine:
    engine = create_engine(*args, **kwargs)
    _opened.add(engine)
    return engine


def open_store(url: str, create: bool = True) -> Engine:
    """Engine for `url` (or a plain path: a SQLite file) with the schema at the current version; a
    one-line StoreError for a bad URL or file. `create=False` (the read verbs) refuses a database
    that does not exist yet."""
    url = database_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise StoreError(f"malformed database URL {url!r}: {error}") from None
    sqlite = parsed.get_backend_name() == "sqlite"
    file = _sqlite_file(parsed)
    if file is not None:
        _check_sqlite_file(file, create)
        if file.exists() and not os.access(file, os.W_OK):
            if create:
                raise StoreError(f"database {file} is read-only: a sweep cannot record into it")
            return _read_only(file)
    try:
        engine = _engine(parsed, connect_args={"timeout": 60} if sqlite else {}, pool_pre_ping=not sqlite)
    except (NoSuchModuleError, ImportError, ArgumentError) as error:
        raise StoreError(f"cannot use database URL {redacted(url)!r}: {error}") from None
    if sqlite:
        _sqlite_pragmas(engine)
    try:
        _upgrade_schema(engine)
    except (DatabaseError, OperationalError, SchemaTooNew) as error:
        engine.dispose()
        reason = getattr(error, "orig", None) or error
        raise StoreError(f"cannot open database {redacted(url)}: {str(reason).strip().splitlines()[0]}") from None
    return engine


def check_url(url: str) -> None:
    """StoreError where `url` cannot be used for a sweep, without creating a database that is not
    there yet (the first recorded cell does)."""
    url = database_url(url)
    file = _sqlite_file(make_url(url)) if "://" in url else None
    if file is not None and not file.exists():
        _check_sqlite_file(file, create=True)
        return
    open_store(url).dispose()


def _read_only(file: Path) -> Engine:
    """A read-only SQLite file, for the read verbs: read as it is, never upgraded."""
    engine = _engine(f"sqlite:///file:{file.resolve()}?mode=ro&uri=true")
    try:
        with engine.connect() as connection:
            version = schema_version(connection)
    except (DatabaseError, OperationalError) as error:
        engine.dispose()
        raise StoreError(f"cannot open database {file}: {error.orig}") from None
    if version != SCHEMA_VERSION:
        engine.dispose()
        raise StoreError(
            f"database {file} is read-only and has schema version {version}; this ckpt-sweep reads "
            f"version {SCHEMA_VERSION}: upgrade a writable copy (any ckpt-sweep verb upgrades it)"
        )
    return engine


def _upgrade_schema(engine: Engine) -> None:
    """Create or upgrade the schema in one transaction, serialised against other processes starting
    at once: BEGIN IMMEDIATE on SQLite, an advisory lock on PostgreSQL."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_ID})")
        upgrade(connection)


def reconnecting(engine: Engine, write: Callable[[], T]) -> T:
    """`write()`, again after a reconnect when the database connection was lost in the middle (a
    PostgreSQL restart); each attempt is one transaction, so a lost one left nothing behind. A
    sweep's reads go through it too."""
    for delay in (*RECONNECT_DELAYS_S, None):
        try:
            return write()
        except DBAPIError as error:
            if not _server_away(engine, error) or delay is None:
                raise
            engine.dispose()
            time.sleep(delay)
    raise AssertionError("unreachable")


def _server_away(engine: Engine, error: DBAPIError) -> bool:
    """The connection was cut, or a new one refused (a server shutting down or not yet up again:
    SQLAlchemy raises those from connecting, with no statement and no connection to invalidate).
    An SQLite file that cannot be opened is not waited for."""
    refused = isinstance(error, OperationalError) and error.statement is None and engine.dialect.name != "sqlite"
    return error.connection_invalidated or refused


def find_run(engine: Engine, name: str, hardware: str, provenance: str = Provenance.MEASURED) -> int | None:
    """The run's id, or None where no such run is recorded yet."""
    query = select(Run.id).where(Run.name == name, Run.hardware == hardware, Run.provenance == provenance)

    def read() -> int | None:
        with engine.connect() as connection:
            return connection.scalar(query)

    return reconnecting(engine, read)


def get_or_create_run(engine: Engine, name: str, hardware: str, provenance: str = Provenance.MEASURED, **fields) -> int:
    """The run's id, creating it if needed; an existing run's environment and config are refreshed
    (they describe its latest cells). Workers that start at once race on the insert: the loser (a
    unique-constraint violation on PostgreSQL) reads the winner's row."""

    def write() -> int:
        with Session(engine) as session, session.begin():
            run = session.scalar(
                select(Run).where(Run.name == name, Run.hardware == hardware, Run.provenance == provenance)
            )
            if run is None:
                run = Run(name=name, hardware=hardware, provenance=provenance, **fields)
                session.add(run)
                session.flush()
            else:
                for key, value in fields.items():
                    setattr(run, key, value)
            return run.id

    try:
        return reconnecting(engine, write)
    except IntegrityError:
        return reconnecting(engine, write)


def runs_recorded_since(engine: Engine, names: list[str], since: dt.datetime) -> dict[int, dict[str, int]]:
    """Runs named `names` with cells recorded at or after `since` -> status -> count of those cells
    (what a sweep wrote, whichever processes or nodes its cells ran on)."""
    query = (
        select(CellRow.run_id, CellRow.status, func.count())
        .join(Run)
        .where(Run.name.in_(names), CellRow.recorded_at >= since, CellRow.is_current.is_(True))
        .group_by(CellRow.run_id, CellRow.status)
    )

    def read() -> dict[int, dict[str, int]]:
        counts: dict[int, dict[str, int]] = {}
        with engine.connect() as connection:
            for run_id, status, count in connection.execute(query):
                counts.setdefault(run_id, {})[status] = count
        return counts

    return reconnecting(engine, read)


def finish_run(engine: Engine, run_id: int) -> None:
    def write() -> None:
        with Session(engine) as session, session.begin():
            session.get(Run, run_id).finished_at = now()

    reconnecting(engine, write)


@dataclass(frozen=True)
class Recorded:
    """What a run holds of a cell's current attempt: enough to decide whether to measure it again."""

    status: str
    steps: int | None = None
    warmup_steps: int | None = None
    model: str | None = None  # the fingerprint of the model it measured (a builder of one's own)
    attempt: int = 1


_RECORDED = (CellRow.cell_key, CellRow.status, CellRow.steps, CellRow.warmup_steps, CellRow.versions, CellRow.attempt)


def _recorded(row) -> Recorded:
    _key, status, steps, warmup, versions, attempt = row
    return Recorded(status, steps, warmup, (versions or {}).get("model"), attempt)


def completed_cells(engine: Engine, run_id: int) -> dict[str, Recorded]:
    """cell key -> what is recorded of every cell's current attempt in the run."""
    query = select(*_RECORDED).where(CellRow.run_id == run_id, CellRow.is_current.is_(True))

    def read() -> dict[str, Recorded]:
        with Session(engine) as session:
            return {row[0]: _recorded(row) for row in session.execute(query)}

    return reconnecting(engine, read)


# NOTE [ One writer per cell ]: two sweeps may write one run at once (two terminals, a resubmitted
# array job, a pod beside a laptop). Each reads what the run holds when it starts, so each would
# measure every cell the other had not finished. Before measuring, a writer claims the cell (one
# claim row per run and cell key), in a transaction that also reads the cell's current attempt: a
# cell another live writer holds, or one recorded since this writer read the run, is not measured
# again. A claim ends with its attempt's record (same transaction) or when its writer gives it up; a
# writer that died leaves one that expires after the cell's time limit, or at once when the owner
# was a process of this host that no longer exists.


@dataclass(frozen=True)
class Claimed:
    """What claiming a cell found: whether this writer holds it now, the writer that does
    otherwise, and the cell's current attempt as the run holds it now."""

    held: bool
    holder: str | None = None
    recorded: Recorded | None = None


def writer() -> str:
    """This process as a claim's owner."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _gone(claim: Claim, moment: dt.datetime) -> bool:
    """A claim whose writer stopped: expired, or a process of this host that no longer exists."""
    expires = claim.expires_at if claim.expires_at.tzinfo else claim.expires_at.replace(tzinfo=dt.UTC)
    host, _, pid = claim.owner.rpartition(":")
    if expires < moment:
        return True
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        return False
    return False


def claim_cell(engine: Engine, run_id: int, key: str, hold_s: float, owner: str | None = None) -> Claimed:
    """Claim a cell for `owner` (this process) for `hold_s` seconds: NOTE [ One writer per cell ]."""
    owner = owner or writer()

    def write() -> Claimed:
        with Session(engine) as session, session.begin():
            moment = now()
            claim = session.get(Claim, (run_id, key), with_for_update=True)
            this_cell = (CellRow.run_id == run_id, CellRow.cell_key == key, CellRow.is_current.is_(True))
            current = session.execute(select(*_RECORDED).where(*this_cell)).first()
            recorded = _recorded(current) if current else None
            if claim is not None and claim.owner != owner and not _gone(claim, moment):
                return Claimed(False, claim.owner, recorded)
            expires = moment + dt.timedelta(seconds=hold_s)
            if claim is None:
                session.add(Claim(run_id=run_id, cell_key=key, owner=owner, expires_at=expires))
            else:
                claim.owner, claim.expires_at = owner, expires
            return Claimed(True, None, recorded)

    try:
        return reconnecting(engine, write)
    except IntegrityError:  # PostgreSQL: another writer inserted the claim first; it holds it
        return reconnecting(engine, write)


def release_claim(engine: Engine, run_id: int, key: str, owner: str | None = None) -> None:
    """Give up a claim this writer holds (a cell it chose not to measure, or an interrupted one)."""

    def write() -> None:
        with Session(engine) as session, session.begin():
            session.execute(
                delete(Claim).where(Claim.run_id == run_id, Claim.cell_key == key, Claim.owner == (owner or writer()))
            )

    reconnecting(engine, write)


def replace_runs(engine: Engine, runs: list[dict]) -> list[int]:
    """Write whole runs in one transaction, replacing the cells of runs that already exist (an
    import of the same published table again).

    Each run: name, hardware, provenance, source, environment, cells: [(cell dict, key, CellResult, shape)].
    """
    ids = []
    with Session(engine) as session, session.begin():
        for published in runs:
            run = session.scalar(
                select(Run).where(
                    Run.name == published["name"],
                    Run.hardware == published["hardware"],
                    Run.provenance == published["provenance"],
                )
            )
            if run is None:
                run = Run(name=published["name"], hardware=published["hardware"], provenance=published["provenance"])
                session.add(run)
            run.source, run.environment = published.get("source"), published.get("environment", {})
            run.finished_at = now()
            run.cells.clear()
            session.flush()  # old cells go before new ones with the same keys arrive
            run.cells = [_cell_row(cell, key, result, shape=shape) for cell, key, result, shape in published["cells"]]
            session.flush()
            ids.append(run.id)
    return ids


@dataclass(frozen=True)
class RemovedRun:
    id: int
    name: str
    hardware: str
    provenance: str
    cells: int  # every attempt
    samples: int


def remove_runs(engine: Engine, run_ids: list[int], delete_them: bool = True) -> list[RemovedRun]:
    """Delete whole runs (their cells, step samples and claims) in one transaction, and say what went
    (`delete_them=False`: what would go); ValueError, with nothing deleted, for an id no run has or a
    run whose cell some writer is measuring now."""

    def write() -> list[RemovedRun]:
        with Session(engine) as session, session.begin():
            runs = {run.id: run for run in session.scalars(select(Run).where(Run.id.in_(run_ids)))}
            if missing := [i for i in run_ids if i not in runs]:
                raise ValueError(f"no run {', '.join(map(str, missing))} here (`ckpt-sweep runs` lists them)")
            moment = now()
            claims = session.scalars(select(Claim).where(Claim.run_id.in_(run_ids)))
            if live := [c for c in claims if not _gone(c, moment)]:
                claim = live[0]
                raise ValueError(
                    f"run {claim.run_id} has a cell being measured now (by {claim.owner}): stop that sweep first"
                )
            of_runs = CellRow.run_id.in_(run_ids)
            per_run = (CellRow.run_id, func.count())
            counted = dict(session.execute(select(*per_run).where(of_runs).group_by(CellRow.run_id)).all())
            samples = dict(session.execute(select(*per_run).join(Sample).where(of_runs).group_by(CellRow.run_id)).all())
            removed = [
                RemovedRun(i, runs[i].name, runs[i].hardware, runs[i].provenance, counted.get(i, 0), samples.get(i, 0))
                for i in run_ids
            ]
            if not delete_them:
                return removed
            session.execute(delete(Sample).where(Sample.cell_id.in_(select(CellRow.id).where(of_runs))))
            session.execute(delete(CellRow).where(of_runs))
            session.execute(delete(Claim).where(Claim.run_id.in_(run_ids)))
            session.execute(delete(Run).where(Run.id.in_(run_ids)))
            return removed

    return reconnecting(engine, write)


def _cell_row(
    cell: dict,
    key: str,
    result: CellResult,
    worker: dict | None = None,
    shape: dict | None = None,
    versions: dict | None = None,
    attempt: int = 1,
) -> CellRow:
    row = CellRow(
        cell_key=key,
        attempt=attempt,
        is_current=True,
        **{name: cell.get(name) for name in COLUMNS},  # a published cell records fewer
        config=cell,
        worker=worker,
        versions=versions,
        host=(worker or {}).get("host"),
        wall_s=result.timings.get("wall_s"),
        **{k: (shape or {}).get(k) for k in SHAPE_COLUMNS},
        samples_per_s=throughput((shape or {}).get("samples_per_step"), result.sec_per_step),
        **result.columns(),
    )
    row.samples = [Sample(step=i, seconds=s, warmup=w) for i, (s, w) in enumerate(result.samples)]
    return row


def trace_folder(url: str) -> Path:
    """Where profiled cells' traces go: traces/ beside a SQLite file, or in the current folder."""
    file = _sqlite_file(make_url(database_url(url)))
    return (file.resolve().parent if file else Path.cwd()) / "traces"


def record_cell(
    engine: Engine,
    run_id: int,
    cell: dict,
    key: str,
    result: CellResult,
    worker: dict | None = None,
    shape: dict | None = None,
    versions: dict | None = None,
) -> int:
    """Record one attempt of a cell with its samples, in one transaction that also ends the cell's
    claim; earlier attempts stay, no longer current. Returns the attempt number."""

    def write() -> int:
        with Session(engine) as session, session.begin():
            attempts = (
                session.scalar(
                    select(func.max(CellRow.attempt)).where(CellRow.run_id == run_id, CellRow.cell_key == key)
                )
                or 0
            )
            session.execute(
                update(CellRow).where(CellRow.run_id == run_id, CellRow.cell_key == key).values(is_current=False)
            )
            row = _cell_row(cell, key, result, worker=worker, shape=shape, versions=versions, attempt=attempts + 1)
            row.run_id = run_id
            session.add(row)
            session.execute(delete(Claim).where(Claim.run_id == run_id, Claim.cell_key == key))
            return attempts + 1

    return reconnecting(engine, write)
