"""The GPU acceptance script runs on a CPU too (tiny scale), so it cannot rot between GPU sessions.
Its checks run through the script in groups (--only), so the test workers share them; the
families check runs in process over a few families (tests/test_families.py trains every family in
bf16 already)."""

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
    "studies": {"studies": "ok"},
}
MEASURED_CELLS = {
    "acceptance-harness": 6,
    "acceptance-oom": 2,
    "acceptance-quantization": 8,
    "acceptance-compile": 2,
    "acceptance-attention": 2,
    "acceptance-batch": 2,
}


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


def test_the_families_check_trains_each_family_it_is_given_and_names_the_unsupported(monkeypatch, tmp_path):
    import ckptlib.families as families
    from sweep.acceptance import checks

    chosen = {name: families.FAMILIES[name] for name in ("flux1", "sd3", "heartmula")}
    monkeypatch.setattr(families, "all_families", lambda: chosen)
    outcome = checks.families("cpu", tmp_path)
    assert outcome.status == "ok", outcome.details
    assert outcome.details == [
        "4 family x mode steps in bf16 on cpu; no diffusers class (unsupported by design): heartmula"
    ]
    monkeypatch.setattr(families, "build", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("injected")))
    outcome = checks.families("cpu", tmp_path)
    assert outcome.status == "failed" and "flux1 none: RuntimeError: injected" in outcome.details
