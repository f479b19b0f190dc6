"""Versioned schema upgrades: a version number in the database and one upgrade step per version
(what asv does with its results' api_version).

Version 0 is an empty database; version 1 the first round's schema (tables, no version table);
version 2 widens byte and count columns to 64 bits, keeps every attempt of a cell, records the
shape the model saw and the versions that measured each cell, and stores empty JSON as NULL;
version 3 adds the spread of the measured steps and the host's load; version 4 the throughput
(samples per step, their unit, samples/s), the attention kernel that ran, the numerics columns and
the profile summary; version 5 the steps until a cell's times settle (compilation's tail); version 6
the claims table (a cell being measured, so two writers never measure it twice).
Upgrades run in the caller's transaction: a failed one leaves the database as it was.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.schema import CreateIndex, CreateTable

from .schema import SCHEMA_VERSION, Base, CellRow, SchemaVersion


class SchemaTooNew(RuntimeError):
    pass


def schema_version(connection: Connection) -> int:
    tables = set(inspect(connection).get_table_names())
    if "schema_version" in tables:
        return connection.scalar(select(SchemaVersion.version).order_by(SchemaVersion.version.desc()).limit(1)) or 1
    return 1 if "cells" in tables else 0


def upgrade(connection: Connection) -> list[int]:
    """Bring the database to SCHEMA_VERSION; returns the versions stepped through."""
    version = schema_version(connection)
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"the database has schema version {version}, newer than this ckpt-sweep's "
            f"{SCHEMA_VERSION}: upgrade ckpt-sweep to read it"
        )
    if version == 0:
        Base.metadata.create_all(connection)
        connection.execute(SchemaVersion.__table__.insert().values(version=SCHEMA_VERSION))
        return [SCHEMA_VERSION]
    stepped = []
    for target in range(version + 1, SCHEMA_VERSION + 1):
        UPGRADES[target](connection)
        connection.execute(SchemaVersion.__table__.insert().values(version=target))
        stepped.append(target)
    return stepped


def _columns(connection: Connection, table: str) -> dict[str, object]:
    return {c["name"]: c["type"] for c in inspect(connection).get_columns(table)}


def _add_missing_columns(connection: Connection, table) -> None:
    present = _columns(connection, table.name)
    for column in table.columns:
        if column.name not in present:
            kind = column.type.compile(dialect=connection.dialect)
            if column.server_default is not None:  # existing rows take the default (attempt 1, current)
                default = column.server_default.arg
                kind += (
                    f" DEFAULT {default.compile(dialect=connection.dialect, compile_kwargs={'literal_binds': True})}"
                )
            connection.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}")


def _json_nulls(connection: Connection, table) -> None:
    """Round one stored Python None in JSON columns as the JSON text 'null'."""
    cast = "::text" if connection.dialect.name == "postgresql" else ""
    for column in table.columns:
        if column.type.__class__.__name__ == "JSON":
            connection.exec_driver_sql(
                f"UPDATE {table.name} SET {column.name} = NULL WHERE {column.name}{cast} = 'null'"
            )


def _create(connection: Connection, table, name: str) -> None:
    ddl = str(CreateTable(table).compile(dialect=connection.dialect))
    connection.exec_driver_sql(ddl.replace(f"CREATE TABLE {table.name} ", f"CREATE TABLE {name} ", 1))


def _rebuild_sqlite_cells(connection: Connection) -> None:
    """SQLite cannot drop a table constraint: cells is rebuilt under the new definition, every row
    copied with its id. Samples point at cells, so they are set aside and put back (with foreign
    keys on, a parent may not go while children point at it)."""
    cells, samples = CellRow.__table__, Base.metadata.tables["samples"]
    old = set(_columns(connection, "cells"))
    _create(connection, cells, "cells_v2")
    shared = ", ".join(c.name for c in cells.columns if c.name in old)
    connection.exec_driver_sql(f"INSERT INTO cells_v2 ({shared}) SELECT {shared} FROM cells")
    connection.exec_driver_sql("CREATE TABLE samples_v1 AS SELECT * FROM samples")
    connection.exec_driver_sql("DROP TABLE samples")
    connection.exec_driver_sql("DROP TABLE cells")
    connection.exec_driver_sql("ALTER TABLE cells_v2 RENAME TO cells")
    samples.create(connection)
    columns = ", ".join(c.name for c in samples.columns)
    connection.exec_driver_sql(f"INSERT INTO samples ({columns}) SELECT {columns} FROM samples_v1")
    connection.exec_driver_sql("DROP TABLE samples_v1")
    for index in cells.indexes:
        connection.execute(CreateIndex(index))


def _upgrade_postgres_cells(connection: Connection) -> None:
    """In place: widen the 32-bit columns, add the new ones, swap the uniqueness constraint."""
    table = CellRow.__table__
    present = _columns(connection, "cells")
    _add_missing_columns(connection, table)
    for column in table.columns:
        if (
            isinstance(column.type, BigInteger)
            and isinstance(present.get(column.name), Integer)
            and not isinstance(present[column.name], BigInteger)
        ):
            connection.exec_driver_sql(f"ALTER TABLE cells ALTER COLUMN {column.name} TYPE BIGINT")
    for constraint in inspect(connection).get_unique_constraints("cells"):
        if constraint["column_names"] == ["run_id", "cell_key"]:
            connection.exec_driver_sql(f'ALTER TABLE cells DROP CONSTRAINT "{constraint["name"]}"')
    connection.exec_driver_sql(
        "ALTER TABLE cells ADD CONSTRAINT cells_run_id_cell_key_attempt_key UNIQUE (run_id, cell_key, attempt)"
    )
    for index in table.indexes:
        if index.name not in {i["name"] for i in inspect(connection).get_indexes("cells")}:
            connection.execute(CreateIndex(index))


def _to_version_2(connection: Connection) -> None:
    runs = Base.metadata.tables["runs"]
    _add_missing_columns(connection, runs)
    _json_nulls(connection, runs)
    if connection.dialect.name == "sqlite":
        _rebuild_sqlite_cells(connection)
    else:
        _upgrade_postgres_cells(connection)
    _json_nulls(connection, CellRow.__table__)
    Base.metadata.tables["schema_version"].create(connection)


def _to_version_3(connection: Connection) -> None:
    """The spread of the measured steps (min_s, max_s) and the host's load (host_load)."""
    _add_missing_columns(connection, CellRow.__table__)


def _to_version_4(connection: Connection) -> None:
    """Throughput (samples per step, their unit, samples/s), the attention kernel that ran and the
    loss and gradient errors: cells recorded before have none."""
    _add_missing_columns(connection, CellRow.__table__)


def _to_version_5(connection: Connection) -> None:
    """The steps until a cell's step times settle: cells recorded before have none."""
    _add_missing_columns(connection, CellRow.__table__)


def _to_version_6(connection: Connection) -> None:
    """Claims of cells being measured: a database before had none."""
    Base.metadata.tables["claims"].create(connection)


UPGRADES = {2: _to_version_2, 3: _to_version_3, 4: _to_version_4, 5: _to_version_5, 6: _to_version_6}
