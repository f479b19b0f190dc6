"""Throughput: a batch axis on any family, samples/s (images, video frames, sequences) recorded
beside sec/step, the batch table and its plot in the report, and both sides' samples/s in a diff."""

import math

import pytest

from ckptlib.families import describe_shape
from sweep.cli import main
from sweep.store.results import throughput
from tests.support.sweeps import FAST, query, run_sweep


@pytest.mark.parametrize(
    "family, preset, unit, per_item",
    [
        ("synthetic", "tiny", "sequences", 1),
        ("flux1", "tiny", "images", 1),
        ("wan", "tiny", "frames", 5),  # the tiny video preset's 5 frames per item
    ],
)
def test_a_batch_axis_records_samples_per_second_for_every_kind_of_family(tmp_path, family, preset, unit, per_item):
    db = tmp_path / "t.db"
    done = run_sweep(db, "sweep=none", f"family={family}", f"preset={preset}", "mode=none", "+shape.batch=1,3", *FAST)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = query(db, "select batch, samples_per_step, sample_unit, sec_per_step, samples_per_s, status from cells")
    assert sorted(r[0] for r in rows) == [1, 3]
    for batch, samples, recorded_unit, seconds, rate, status in rows:
        assert status == "ok" and recorded_unit == unit and samples == batch * per_item
        assert math.isclose(rate, samples / seconds, rel_tol=1e-12)


def test_the_report_has_a_batch_table_and_plot_and_diff_shows_samples_per_second(tmp_path, capsys):
    db = tmp_path / "t.db"
    done = run_sweep(db, "sweep=none", "preset=tiny", "mode=none,layer", "+shape.batch=1,2,4", *FAST)
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "reports"
    main(["report", "--db", f"sqlite:///{db}", "--out", str(out)])
    page = (out / "synthetic.md").read_text()
    section = page[page.index("throughput by batch") :]
    header = next(line for line in section.splitlines() if line.startswith("| Mode"))
    assert [c.strip() for c in header.strip("|").split("|")] == ["Mode", "batch 1", "batch 2", "batch 4"]
    rows = [line for line in section.splitlines() if line.startswith("| No checkpoint") or line.startswith("| Torch")]
    assert len(rows) == 2 and all(line.count("sequences/s") == 3 for line in rows)
    recorded = {(mode, batch): rate for mode, batch, rate in query(db, "select mode, batch, samples_per_s from cells")}
    assert f"{recorded[('layer', 4)]:.3g} sequences/s" in next(r for r in rows if r.startswith("| Torch layer"))
    picture = next((out / "plots").glob("*batch.png"))
    assert picture.stat().st_size > 10_000
    capsys.readouterr()
    main(["diff", "1", "1", "--db", f"sqlite:///{db}", "--out", str(tmp_path / "diff")])
    shown = capsys.readouterr().out
    assert f"{recorded[('none', 2)]:.3g} sequences/s" in shown


def test_throughput_is_blank_without_a_time_or_a_sample_count():
    assert throughput(None, 1.0) is None and throughput(4, None) is None and throughput(0, 1.0) is None
    assert throughput(20, 1.223) == pytest.approx(16.35, abs=0.01)  # the docs' H200 batch-20 figure


def test_families_say_what_a_sample_is():
    assert describe_shape("flux1", "dev", batch=2)["samples_per_step"] == 2
    wan = describe_shape("wan", "t2v-14b", batch=2)
    assert wan["sample_unit"] == "frames" and wan["samples_per_step"] == 2 * wan["frames"]
    assert describe_shape("ace-step", "tiny")["sample_unit"] == "clips"
