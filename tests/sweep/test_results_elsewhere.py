"""Results a user takes elsewhere: `runs` lists them, `export` writes them for other tools, `diff
--fail-on` gates a CI job, a plain path is a SQLite database."""

import csv
import io
import json

import pytest

from sweep.report.published import BUNDLED, import_file
from sweep.store import database as store
from sweep.store.results import CellResult
from tests.support.sweeps import run_cli

GIB = 2**30
CELL = {"family": "f", "preset": "p", "mode": "layer", "quantization": "none", "training": "lora"}


def measured(hardware: str, seconds: list[float], peak: int = 70 * GIB, status: str = "ok") -> dict:
    """A measured run of one cell at a real GPU's magnitude (tens of GiB)."""
    figures = dict(sec_per_step=sorted(seconds)[len(seconds) // 2], peak_bytes=peak) if status == "ok" else {}
    result = CellResult(status, samples=[(s, False) for s in seconds] if status == "ok" else [], **figures)
    return {
        "name": "ci",
        "hardware": hardware,
        "provenance": "measured",
        "cells": [(CELL, "k", result, {"tokens": 4096})],
    }


@pytest.fixture
def db(tmp_path):
    """A plain path, as a user types it: the SQLite file results.db."""
    path = tmp_path / "results.db"
    engine = store.open_store(str(path))
    import_file(engine, BUNDLED / "unsloth-synthetic.md")
    store.replace_runs(
        engine,
        [
            measured("baseline", [1.0, 1.01, 0.99, 1.0, 1.02, 0.98]),
            measured("slower", [1.5, 1.49, 1.52, 1.51, 1.5, 1.48]),
            measured("noisy", [1.0, 1.3, 0.9, 1.25, 0.95, 1.2]),
            measured("bigger", [1.0, 1.01, 0.99, 1.0, 1.02, 0.98], peak=80 * GIB),
            measured("oom", [], status="oom"),
        ],
    )
    engine.dispose()
    return path


def test_a_plain_path_is_that_sqlite_file(db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert store.database_url("results.db") == f"sqlite:///{db}"
    assert store.database_url("sqlite:/one-slash.db") == "sqlite:/one-slash.db"  # a URL, malformed: said as such
    shown = run_cli(["runs", "--db", "results.db"])
    assert shown.returncode == 0, shown.stderr
    missing = run_cli(["runs", "--db", "nowhere.db"])
    assert missing.returncode == 1 and f"no database at {tmp_path / 'nowhere.db'}" in missing.stderr


def test_runs_lists_every_run_with_its_cells(db):
    shown = run_cli(["runs", "--db", str(db)])
    assert shown.returncode == 0, shown.stderr
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in shown.stdout.splitlines() if line.startswith("│")]
    assert [r[:5] for r in rows] == [
        ["1", "packed-latents", "H100 80GB", "published", "15 (15)"],
        ["2", "packed-latents", "L40S", "published", "15 (15)"],
        ["3", "large-shape", "H100 80GB", "published", "5 (5)"],
        ["4", "large-shape", "L40S", "published", "5 (5)"],
        ["5", "ci", "baseline", "measured", "1 (1)"],
        ["6", "ci", "slower", "measured", "1 (1)"],
        ["7", "ci", "noisy", "measured", "1 (1)"],
        ["8", "ci", "bigger", "measured", "1 (1)"],
        ["9", "ci", "oom", "measured", "1 (0)"],
    ]


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_export_writes_each_cell_with_its_run(db, tmp_path, fmt):
    out = tmp_path / f"cells.{fmt}"
    done = run_cli(["export", "--db", str(db), "--runs", "H100 80GB", "bigger", "--format", fmt, "--out", str(out)])
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    rows = json.loads(text) if fmt == "json" else list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 20 + 1
    big = next(r for r in rows if r["hardware"] == "bigger")
    assert (big["run_name"], big["provenance"], big["family"], int(big["tokens"])) == ("ci", "measured", "f", 4096)
    assert int(big["peak_bytes"]) == 80 * GIB  # a GiB-sized figure, whole
    published = next(
        r for r in rows if r["hardware"] == "H100 80GB" and r["preset"] == "docs-large" and r["mode"] == "layer"
    )
    assert published["provenance"] == "published" and float(published["sec_per_step"]) > 0
    assert not list(tmp_path.glob(".*partial"))


def test_export_to_standard_output_and_bad_input(db):
    shown = run_cli(["export", "--db", str(db), "--runs", "oom", "--format", "json"])
    assert shown.returncode == 0 and [r["status"] for r in json.loads(shown.stdout)] == ["oom"]
    unknown = run_cli(["export", "--db", str(db), "--runs", "A100"])
    assert unknown.returncode == 1 and "no run with id or hardware 'A100'" in unknown.stderr


@pytest.mark.parametrize(
    "b, gates, failing",
    [
        ("slower", "slower:10%", "slower: 1.50x the time"),
        ("slower", "slower:60%", None),
        ("noisy", "slower:10%", None),  # 1.1x and over, but within the noise its samples show
        ("bigger", "bigger:5%", "bigger: 1.14x the peak"),
        ("bigger", "slower:10%,oom", None),
        ("oom", "oom", "oom: ok -> OOM"),
        ("oom", "failed", "failed: ok -> oom"),
    ],
)
def test_diff_fail_on_exits_non_zero_naming_each_failing_cell(db, tmp_path, b, gates, failing):
    done = run_cli(["diff", "baseline", b, "--db", str(db), "--out", str(tmp_path / "d"), "--fail-on", gates])
    if failing is None:
        assert done.returncode == 0 and f"--fail-on {gates}: every cell passes" in done.stdout, done.stderr
    else:
        assert done.returncode == 1, done.stdout
        assert f"1 cell(s) of {b} fail --fail-on {gates}:" in done.stderr
        assert f"f p 4096 tokens layer: {failing}" in done.stderr


@pytest.mark.parametrize(
    "gates, message",
    [
        ("slow:10%", "--fail-on 'slow:10%': unknown; valid: slower, bigger, oom, failed (slower and bigger take :P%)"),
        ("slower", "--fail-on 'slower': slower needs a share, e.g. slower:10%"),
        ("oom:5%", "--fail-on 'oom:5%': oom takes no share"),
        ("bigger:ten%", "--fail-on 'bigger:ten%': 'ten%' is not a percentage such as 10%"),
    ],
)
def test_diff_refuses_a_gate_it_does_not_know_in_one_line(db, tmp_path, gates, message):
    done = run_cli(["diff", "baseline", "slower", "--db", str(db), "--out", str(tmp_path / "d"), "--fail-on", gates])
    assert done.returncode == 1 and done.stderr.strip() == f"ckpt-sweep: {message}"
    assert not (tmp_path / "d").exists()
