"""The GPU acceptance script runs on a CPU too (tiny scale), so it cannot rot between GPU sessions.
Its checks run in three groups (the script's --only), so the two test workers share them."""

import json
import sqlite3
import subprocess
import sys

import pytest

from tests.sweep_helpers import ROOT

GROUPS = {
    "fork_server,offload,harness,environment": {
        "fork_server": "ok",
        "offload": "ok",
        "harness": "ok",
        "environment": "skipped",
    },
    "oom,quantization": {"oom": "ok", "quantization": "ok"},
    "families": {"families": "ok"},
}
MEASURED_CELLS = {"acceptance-harness": 6, "acceptance-oom": 2, "acceptance-quantization": 8}


def run_script(out, only: str):
    done = subprocess.run(
        [sys.executable, "scripts/gpu_acceptance.py", "--device", "cpu", "--out", str(out), "--only", only],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return {p.stem: json.loads(p.read_text()) for p in (out / "checks").glob("*.json")}


@pytest.mark.parametrize("only", GROUPS)
def test_the_acceptance_script_passes_on_a_cpu(tmp_path, only):
    out = tmp_path / "acceptance"
    outcomes = run_script(out, only)
    assert {name: o["status"] for name, o in outcomes.items()} == GROUPS[only]
    assert all((out / "logs" / f"{name}.log").exists() for name in outcomes)
    summary = (out / "summary.md").read_text()
    assert all(f"| {name} | {status} |" in summary for name, status in GROUPS[only].items())
    expected = {name: n for name, n in MEASURED_CELLS.items() if name.removeprefix("acceptance-") in outcomes}
    if expected:
        with sqlite3.connect(out / "results.db") as db:
            runs = dict(
                db.execute(
                    "select r.name, count(*) from cells c join runs r on r.id = c.run_id "
                    "where r.provenance = 'measured' group by r.name"
                )
            )
        assert runs == expected
    if "environment" in outcomes:
        assert "need a CUDA device" in outcomes["environment"]["details"][0]
    if "harness" in outcomes:
        assert "measured/predicted - 1" in summary
        log = (out / "logs" / "harness.log").read_text()
        assert "ckpt-sweep" in log or "sweep.cli" in log
