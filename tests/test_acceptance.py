"""The GPU acceptance script runs on a CPU too (tiny scale), so it cannot rot between GPU sessions."""

import json
import sqlite3
import subprocess
import sys

from tests.sweep_helpers import ROOT


def test_the_acceptance_script_passes_on_a_cpu(tmp_path):
    out = tmp_path / "acceptance"
    done = subprocess.run(
        [sys.executable, "scripts/gpu_acceptance.py", "--device", "cpu", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    outcomes = {p.stem: json.loads(p.read_text()) for p in (out / "checks").glob("*.json")}
    assert {name: o["status"] for name, o in outcomes.items()} == {
        "fork_server": "ok",
        "offload": "ok",
        "harness": "ok",
        "oom": "ok",
        "quantization": "ok",
        "families": "ok",
        "environment": "skipped",
    }
    assert "need a CUDA device" in outcomes["environment"]["details"][0]
    summary = (out / "summary.md").read_text()
    assert "| harness | ok |" in summary and "measured/predicted - 1" in summary
    with sqlite3.connect(out / "results.db") as db:
        runs = dict(
            db.execute(
                "select r.name, count(*) from cells c join runs r on r.id = c.run_id "
                "where r.provenance = 'measured' group by r.name"
            )
        )
    assert runs == {"acceptance-harness": 6, "acceptance-oom": 2, "acceptance-quantization": 8}
    assert all((out / "logs" / f"{name}.log").exists() for name in outcomes)
    assert (
        "ckpt-sweep" in (out / "logs" / "harness.log").read_text()
        or "sweep.cli" in (out / "logs" / "harness.log").read_text()
    )
