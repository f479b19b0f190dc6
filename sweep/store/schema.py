"""The results database's tables (SQLAlchemy 2), at schema version SCHEMA_VERSION (each version's
upgrade is in sweep/store/migrations.py).

Every byte and count column is 64-bit (PostgreSQL's INTEGER is 32-bit: a 24 GiB peak would not
fit). A cell re-run is a new attempt; the earlier ones stay, marked not current. A cell being
measured holds a claim, so two sweeps writing one run at once never measure it twice.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from sweep.vocabulary import Provenance

SCHEMA_VERSION = 6
JSON_OR_NULL = JSON(none_as_null=True)  # None is SQL NULL, not the JSON text 'null'


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON_OR_NULL, int: BigInteger}


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class SchemaVersion(Base):
    __tablename__ = "schema_version"

    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    upgraded_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=now)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("name", "hardware", "provenance"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    hardware: Mapped[str] = mapped_column(String(200))
    provenance: Mapped[str] = mapped_column(String(20), default=Provenance.MEASURED)  # sweep.vocabulary.Provenance
    source: Mapped[str | None] = mapped_column(Text)
    device: Mapped[str | None] = mapped_column(String(50))
    environment: Mapped[dict[str, Any]] = mapped_column(default=dict)  # the latest capture
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=now)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    cells: Mapped[list[CellRow]] = relationship(back_populates="run", cascade="all, delete-orphan")


class CellRow(Base):
    __tablename__ = "cells"
    __table_args__ = (
        UniqueConstraint("run_id", "cell_key", "attempt"),
        Index("ix_cells_current", "run_id", "is_current"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(Integer, ForeignKey("runs.id"), index=True)
    cell_key: Mapped[str] = mapped_column(String(64))
    attempt: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))  # 1, 2, ... per (run, cell key)
    # the latest attempt: what reports show
    is_current: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    family: Mapped[str] = mapped_column(String(100))
    preset: Mapped[str] = mapped_column(String(100))
    mode: Mapped[str] = mapped_column(String(100))
    backend: Mapped[str | None] = mapped_column(String(30))
    interval: Mapped[int | None] = mapped_column(Integer)
    stride: Mapped[int | None] = mapped_column(Integer)
    offload_attention: Mapped[bool | None] = mapped_column(Boolean)
    quantization: Mapped[str] = mapped_column(String(50), default="none")
    training: Mapped[str | None] = mapped_column(String(20))
    # The shape as the model sees it: sequence tokens (latent tokens after the VAE and patching),
    # text tokens, and the input's resolution and frames (families).
    tokens: Mapped[int | None]
    text_tokens: Mapped[int | None]
    height: Mapped[int | None]
    width: Mapped[int | None]
    frames: Mapped[int | None]
    batch: Mapped[int | None]
    # throughput: what one step trains on (images, video frames, clips, sequences) and how fast
    samples_per_step: Mapped[int | None]
    sample_unit: Mapped[str | None] = mapped_column(String(20))
    samples_per_s: Mapped[float | None] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    traceback: Mapped[str | None] = mapped_column(Text)
    sec_per_step: Mapped[float | None] = mapped_column(Float)
    mean_s: Mapped[float | None] = mapped_column(Float)
    iqr_s: Mapped[float | None] = mapped_column(Float)
    min_s: Mapped[float | None] = mapped_column(Float)
    max_s: Mapped[float | None] = mapped_column(Float)
    first_step_s: Mapped[float | None] = mapped_column(Float)
    settle_steps: Mapped[int | None]  # steps (from the first) before the times settle: compilation, autotuning
    warmup_steps: Mapped[int | None]
    steps: Mapped[int | None]
    final_loss: Mapped[float | None] = mapped_column(Float)
    peak_bytes: Mapped[int | None]
    peak_reserved_bytes: Mapped[int | None]
    first_step_peak_bytes: Mapped[int | None]
    peak_at_oom_bytes: Mapped[int | None]
    alloc_retries: Mapped[int | None]
    host_offload_peak_bytes: Mapped[int | None]
    weight_bytes: Mapped[int | None]
    breakdown: Mapped[dict[str, Any] | None]
    device_name: Mapped[str | None] = mapped_column(String(200))
    attention_backend: Mapped[str | None] = mapped_column(String(60))
    loss_rel_error: Mapped[float | None] = mapped_column(Float)
    grad_rel_error: Mapped[float | None] = mapped_column(Float)
    profile: Mapped[dict[str, Any] | None]
    host_load: Mapped[float | None] = mapped_column(Float)
    report: Mapped[dict[str, Any] | None]
    plan: Mapped[dict[str, Any] | None]
    timings: Mapped[dict[str, Any] | None]
    host: Mapped[str | None] = mapped_column(String(200))
    worker: Mapped[dict[str, Any] | None]  # process, host, GPU name/UUID, scheduler ids
    versions: Mapped[dict[str, Any] | None]  # code commit and package versions that measured it
    wall_s: Mapped[float | None] = mapped_column(Float)
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    recorded_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=now)
    run: Mapped[Run] = relationship(back_populates="cells")
    samples: Mapped[list[Sample]] = relationship(
        back_populates="cell", cascade="all, delete-orphan", order_by="Sample.step"
    )


class Sample(Base):
    __tablename__ = "samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cell_id: Mapped[int] = mapped_column(Integer, ForeignKey("cells.id"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    warmup: Mapped[bool] = mapped_column(Boolean)
    cell: Mapped[CellRow] = relationship(back_populates="samples")


class Claim(Base):
    """A cell some writer is measuring now (NOTE [ One writer per cell ] in sweep/store/database.py):
    at most one per (run, cell key); gone when its attempt is recorded."""

    __tablename__ = "claims"

    run_id: Mapped[int] = mapped_column(Integer, ForeignKey("runs.id"), primary_key=True)
    cell_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))  # host:pid of the process measuring it
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))  # then another writer may take it
