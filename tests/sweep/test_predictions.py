"""Predictions through the harness: predicted runs of the sweep, their reports, diff and advise, and settings refused before anything runs."""

import pytest

from sweep.report.text import cell_texts
from tests.ckptlib.test_predict import TOLERANCE


def test_predictions_through_the_sweep_report_diff_and_advise(tmp_path):
    """predict=true records a predicted run; skip_predicted_oom skips what will not fit; reports put
    the prediction beside the skipped cell; diff compares predicted with measured; advise fills gaps."""
    from sweep.report.advise import advise
    from sweep.report.diff import diff_runs
    from sweep.store.database import open_store
    from sweep.store.query import load_cells, select_runs
    from tests.support.sweeps import FAST, query, run_sweep

    db = tmp_path / "p.db"
    cells = ["sweep=none", "preset=cpu-256", "mode=none,layer", "training=frozen"]
    done = run_sweep(db, *cells, "predict=true", "predict_device=cpu", "card_gib=0.04")
    assert done.returncode == 0, done.stderr[-2000:]
    predicted = dict(query(db, "select mode, status from cells"))
    assert predicted == {"none": "oom", "layer": "ok"}  # 0.05 GiB and 0.03 GiB against a 0.04 GiB card
    assert query(db, "select provenance, hardware from runs") == [("predicted", "predicted: cpu, 0.04 GiB card")]
    assert query(db, "select count(*) from cells where breakdown is null or peak_bytes is null") == [(0,)]
    assert query(db, "select count(*) from samples") == [(0,)]

    done = run_sweep(db, *cells, *FAST[:2], "skip_predicted_oom=true", "card_gib=0.04")
    assert done.returncode == 0, done.stderr[-2000:]
    measured = dict(
        query(db, "select mode, status from cells join runs on runs.id = run_id where provenance = 'measured'")
    )
    assert measured == {"none": "predicted-oom", "layer": "ok"}

    engine = open_store(f"sqlite:///{db}")
    frame = load_cells(engine, select_runs(engine))
    skipped = frame[(frame["provenance"] == "measured") & (frame["mode"] == "none")]
    [(predicted_none,)] = query(db, "select peak_bytes from cells where mode = 'none' and peak_bytes is not null")
    assert cell_texts(skipped) == [f"OOM (predicted {predicted_none / 2**30:.2f} GiB)"]

    result = diff_runs(engine, "predicted: cpu, 0.04 GiB card", frame[frame.provenance == "measured"].hardware.iloc[0])
    layer = result.cells[result.cells["mode"] == "layer"].iloc[0]
    assert layer.memory_ratio == pytest.approx(1.0, abs=TOLERANCE)

    advice = advise(frame, "synthetic", 40 * 2**20, margin=0.0)
    assert advice.mode == "layer" and "predictions (predicted: cpu, 0.04 GiB card) stand in for 1 mode(s)" in str(
        advice
    )
    engine.dispose()


def test_bad_prediction_settings_are_refused_before_anything_runs(tmp_path):
    from tests.support.sweeps import query, run_sweep

    db = tmp_path / "bad.db"
    done = run_sweep(db, "sweep=none", "preset=tiny", "predict=true", "predict_device=tpu", "card_gib=-1")
    assert done.returncode != 0
    assert "unknown predict_device 'tpu'; valid: cuda, cuda-pre-hopper, cpu" in done.stderr
    assert "card_gib must be a positive number of GiB, got -1" in done.stderr
    done = run_sweep(db, "sweep=none", "preset=tiny", "device=cpu", "skip_predicted_oom=true")
    assert done.returncode != 0 and "skip_predicted_oom on a CPU needs a card size: set card_gib" in done.stderr
    assert not db.exists() or query(db, "select count(*) from cells") == [(0,)]
