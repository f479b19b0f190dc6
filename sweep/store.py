"""The results database (SQLAlchemy 2): runs, cells and per-step samples.

SQLite gets WAL, a busy timeout and BEGIN IMMEDIATE transactions, so several sweeps (or launcher
workers) writing one file serialise instead of failing or losing rows. Each cell is written in
one transaction: an interrupted sweep leaves only whole cells behind.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    func,
    inspect,
    select,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from .results import CellResult

PROVENANCES = ("measured", "published", "predicted")
SCHEMA_LOCK_ID = 0x636B7074  # "ckpt": the advisory lock schema changes take on PostgreSQL


class StoreError(RuntimeError):
    """The database URL or file cannot be used; nothing was written."""


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON}


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("name", "hardware", "provenance"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    hardware: Mapped[str] = mapped_column(String(200))
    provenance: Mapped[str] = mapped_column(String(20), default="measured")
    source: Mapped[str | None] = mapped_column(Text)
    device: Mapped[str | None] = mapped_column(String(50))
    environment: Mapped[dict[str, Any]] = mapped_column(default=dict)
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=now)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    cells: Mapped[list[CellRow]] = relationship(back_populates="run", cascade="all, delete-orphan")


class CellRow(Base):
    __tablename__ = "cells"
    __table_args__ = (UniqueConstraint("run_id", "cell_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    cell_key: Mapped[str] = mapped_column(String(64))
    family: Mapped[str] = mapped_column(String(100))
    preset: Mapped[str] = mapped_column(String(100))
    mode: Mapped[str] = mapped_column(String(100))
    backend: Mapped[str | None] = mapped_column(String(30))
    interval: Mapped[int | None] = mapped_column(Integer)
    stride: Mapped[int | None] = mapped_column(Integer)
    offload_attention: Mapped[bool | None] = mapped_column(Boolean)
    quantization: Mapped[str] = mapped_column(String(50), default="none")
    training: Mapped[str | None] = mapped_column(String(20))
    tokens: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    traceback: Mapped[str | None] = mapped_column(Text)
    sec_per_step: Mapped[float | None] = mapped_column(Float)
    mean_s: Mapped[float | None] = mapped_column(Float)
    iqr_s: Mapped[float | None] = mapped_column(Float)
    first_step_s: Mapped[float | None] = mapped_column(Float)
    warmup_steps: Mapped[int | None] = mapped_column(Integer)
    steps: Mapped[int | None] = mapped_column(Integer)
    final_loss: Mapped[float | None] = mapped_column(Float)
    peak_bytes: Mapped[int | None] = mapped_column(Integer)
    peak_reserved_bytes: Mapped[int | None] = mapped_column(Integer)
    first_step_peak_bytes: Mapped[int | None] = mapped_column(Integer)
    peak_at_oom_bytes: Mapped[int | None] = mapped_column(Integer)
    alloc_retries: Mapped[int | None] = mapped_column(Integer)
    host_offload_peak_bytes: Mapped[int | None] = mapped_column(Integer)
    breakdown: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # bytes by category at the peak
    weight_bytes: Mapped[int | None] = mapped_column(Integer)  # storage of the base weights (quantized or not)
    device_name: Mapped[str | None] = mapped_column(String(200))
    host: Mapped[str | None] = mapped_column(String(200))
    worker: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # process, host, GPU name/UUID, scheduler ids
    wall_s: Mapped[float | None] = mapped_column(Float)
    timings: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    recorded_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=now)
    run: Mapped[Run] = relationship(back_populates="cells")
    samples: Mapped[list[Sample]] = relationship(back_populates="cell", cascade="all, delete-orphan",
                                                 order_by="Sample.step")


class Sample(Base):
    __tablename__ = "samples"

    id: Mapped[int] = mapped_column(primary_key=True)
    cell_id: Mapped[int] = mapped_column(ForeignKey("cells.id"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    warmup: Mapped[bool] = mapped_column(Boolean)
    cell: Mapped[CellRow] = relationship(back_populates="samples")




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


def open_store(url: str) -> Engine:
    """Engine for `url` with the schema in place; a clear StoreError for a bad URL or unreadable file."""
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise StoreError(f"malformed database URL {url!r}: {error}") from None
    sqlite = parsed.get_backend_name() == "sqlite"
    if sqlite and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database)
        if path.exists() and not path.is_file():
            raise StoreError(f"database path {path} is not a file")
        if not path.parent.exists():
            raise StoreError(f"database directory {path.parent} does not exist")
        mount, kind = filesystem_of(path.resolve())
        if kind in NETWORK_FILESYSTEMS:
            raise StoreError(f"database {path} is on a network file system ({kind} at {mount}): SQLite's locking is "
                             f"not safe there and rows from parallel cells can be lost; use a PostgreSQL URL "
                             f"(db.url=postgresql+psycopg://user:password@host/database)")
    try:
        engine = create_engine(parsed, connect_args={"timeout": 60} if sqlite else {})
    except (NoSuchModuleError, ImportError, ArgumentError) as error:
        raise StoreError(f"cannot use database URL {url!r}: {error}") from None
    if sqlite:
        _sqlite_pragmas(engine)
    try:
        _create_or_upgrade_schema(engine)
    except (DatabaseError, OperationalError) as error:
        engine.dispose()
        raise StoreError(f"cannot open database {parsed.render_as_string(hide_password=True)}: {error.orig}") from None
    return engine


NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
                       "fuse.sshfs", "fuse.glusterfs", "9p", "afs"}


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


def _create_or_upgrade_schema(engine: Engine) -> None:
    """Create missing tables and add columns a newer version declares (nullable, additive only).

    One transaction, serialised against other processes starting at once: BEGIN IMMEDIATE on
    SQLite, an advisory lock on PostgreSQL."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_ID})")
        Base.metadata.create_all(connection)
        inspector = inspect(connection)
        for table in Base.metadata.sorted_tables:
            present = {column["name"] for column in inspector.get_columns(table.name)}
            for column in table.columns:
                if column.name not in present:
                    kind = column.type.compile(dialect=connection.dialect)
                    connection.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}")


def get_or_create_run(engine: Engine, name: str, hardware: str, provenance: str = "measured", **fields) -> int:
    """The run's id, creating it if needed. Workers that start at once race on the insert: the
    loser (a unique-constraint violation on PostgreSQL) reads the winner's row."""
    for attempt in range(2):
        try:
            with Session(engine) as session, session.begin():
                run = session.scalar(select(Run).where(Run.name == name, Run.hardware == hardware,
                                                       Run.provenance == provenance))
                if run is None:
                    run = Run(name=name, hardware=hardware, provenance=provenance, **fields)
                    session.add(run)
                    session.flush()
                return run.id
        except IntegrityError:
            if attempt:
                raise
    raise AssertionError("unreachable")


def runs_recorded_since(engine: Engine, names: list[str], since: dt.datetime) -> dict[int, dict[str, int]]:
    """Runs named `names` with cells recorded at or after `since` -> status -> count of those cells
    (what a sweep wrote, whichever processes or nodes its cells ran on)."""
    query = (select(CellRow.run_id, CellRow.status, func.count()).join(Run)
             .where(Run.name.in_(names), CellRow.recorded_at >= since)
             .group_by(CellRow.run_id, CellRow.status))
    counts: dict[int, dict[str, int]] = {}
    with engine.connect() as connection:
        for run_id, status, count in connection.execute(query):
            counts.setdefault(run_id, {})[status] = count
    return counts


def finish_run(engine: Engine, run_id: int) -> None:
    with Session(engine) as session, session.begin():
        session.get(Run, run_id).finished_at = now()


def completed_cells(engine: Engine, run_id: int) -> dict[str, str]:
    """cell key -> status of every cell already recorded in the run."""
    with Session(engine) as session:
        return dict(session.execute(select(CellRow.cell_key, CellRow.status).where(CellRow.run_id == run_id)).all())


def replace_runs(engine: Engine, runs: list[dict]) -> list[int]:
    """Write whole runs in one transaction, replacing the cells of runs that already exist.

    Each run: name, hardware, provenance, source, environment, cells: [(cell dict, key, result, tokens)].
    """
    ids = []
    with Session(engine) as session, session.begin():
        for spec in runs:
            run = session.scalar(select(Run).where(Run.name == spec["name"], Run.hardware == spec["hardware"],
                                                   Run.provenance == spec["provenance"]))
            if run is None:
                run = Run(name=spec["name"], hardware=spec["hardware"], provenance=spec["provenance"])
                session.add(run)
            run.source, run.environment, run.finished_at = spec.get("source"), spec.get("environment", {}), now()
            run.cells.clear()
            session.flush()  # old cells go before new ones with the same keys arrive
            run.cells = [_cell_row(cell, key, result, tokens=tokens) for cell, key, result, tokens in spec["cells"]]
            session.flush()
            ids.append(run.id)
    return ids


def _cell_row(cell: dict, key: str, result: CellResult, worker: dict | None = None,
              tokens: int | None = None) -> CellRow:
    row = CellRow(
        cell_key=key, family=cell["family"], preset=cell["preset"], mode=cell["mode"],
        backend=cell.get("backend"), interval=cell.get("interval"), stride=cell.get("stride"),
        offload_attention=cell.get("offload_attention"), quantization=cell.get("quantization", "none"),
        training=cell.get("training"), tokens=tokens, config=cell, worker=worker,
        host=(worker or {}).get("host"),
        wall_s=result.timings.get("wall_s"), **result.columns(),
    )
    row.samples = [Sample(step=i, seconds=s, warmup=w) for i, (s, w) in enumerate(result.samples)]
    return row


def record_cell(engine: Engine, run_id: int, cell: dict, key: str, result: CellResult, worker: dict | None = None,
                tokens: int | None = None) -> None:
    """Insert or replace one cell and its samples, in one transaction."""
    with Session(engine) as session, session.begin():
        existing = session.scalar(select(CellRow).where(CellRow.run_id == run_id, CellRow.cell_key == key))
        if existing is not None:
            session.delete(existing)
            session.flush()
        row = _cell_row(cell, key, result, worker=worker, tokens=tokens)
        row.run_id = run_id
        session.add(row)
