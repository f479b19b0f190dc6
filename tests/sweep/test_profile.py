"""measure.profile=true: the summary of a capture adds up (checked on stand-in intervals with
overlaps, as a CUDA trace has them), profiled steps are not timed, the trace lands beside the
database by cell key, and the report shows the summary."""

import json
from pathlib import Path

import pytest

from sweep.run.scenarios.profile import Interval, summarize
from tests.support.sweeps import FAST, SUPPORT, query, run_sweep


def test_a_device_summary_merges_overlaps_and_exposes_only_uncovered_copies():
    events = [
        Interval("sm90_xmma_gemm_bf16", 0, 10, device=True),
        Interval("sm90_xmma_gemm_bf16", 5, 15, device=True),  # on another stream: overlaps the first
        Interval("flash_fwd_kernel", 20, 30, device=True),
        Interval("Memcpy DtoH (Device -> Pinned)", 12, 25, device=True),
        Interval("aten::mm", 0, 40, device=False),  # a host op: not a kernel
    ]
    summary = summarize(events, interval_s=50e-6, steps=1, on_device=True)
    assert summary.kernel_s == pytest.approx(25e-6)  # [0, 15] and [20, 30]
    assert summary.kernel_active_share == pytest.approx(0.5)
    assert summary.gemm_share == pytest.approx(20 / 30) and summary.attention_share == pytest.approx(10 / 30)
    assert summary.copy_s == pytest.approx(13e-6)
    assert summary.exposed_copy_s == pytest.approx(5e-6)  # [15, 20] only: kernels cover the rest
    assert summary.top_ops == [
        ("sm90_xmma_gemm_bf16", pytest.approx(20e-6)),
        ("flash_fwd_kernel", pytest.approx(10e-6)),
    ]


def test_profiled_cells_keep_their_timed_steps_apart_and_their_trace_beside_the_database(tmp_path):
    from sweep.cli import main

    db = tmp_path / "p.db"
    done = run_sweep(db, "sweep=none", "preset=tiny", "mode=none,layer", "measure.profile=true",
                     "measure.profile_steps=2", *FAST)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = query(db, "select id, cell_key, profile, steps, warmup_steps from cells")
    assert len(rows) == 2
    for cell_id, key, profile, steps, warmup in rows:
        summary = json.loads(profile)
        assert summary["steps"] == 2 and summary["trace"] == f"{key}.json"
        assert (tmp_path / "traces" / f"{key}.json").stat().st_size > 1000
        assert 0 < summary["kernel_active_share"] <= 1
        assert 0 < summary["gemm_share"] and summary["gemm_share"] + summary["attention_share"] <= 1
        assert sum(seconds for _, seconds in summary["top_ops"]) <= summary["kernel_s"] * 1.001
        [(samples,)] = query(db, f"select count(*) from samples where cell_id = {cell_id}")
        assert samples == steps + warmup  # the profiled steps are none of them
    out = tmp_path / "reports"
    main(["report", "--db", f"sqlite:///{db}", "--out", str(out)])
    page = (out / "synthetic.md").read_text()
    assert "profiles on" in page and page.count("traces/") == 2


def test_profiling_no_steps_is_refused(tmp_path):
    done = run_sweep(tmp_path / "p.db", "sweep=none", "preset=tiny", "mode=none", "measure.profile=true",
                     "measure.profile_steps=0", *FAST)  # fmt: skip
    assert done.returncode != 0 and "measure.profile_steps must be at least 1 to profile, got 0" in done.stderr
    assert not Path(tmp_path / "p.db").exists()


def test_no_timed_step_runs_under_the_profiler(monkeypatch):
    """The profiler's overhead on the timed steps is zero: it is on for the profiled steps only."""
    from sweep.config.cell import Cell
    from sweep.run.scenarios.measure import MeasureSettings, measure_cell

    monkeypatch.syspath_prepend(str(SUPPORT))
    import profiler_watch

    profiler_watch.STEPS.clear()
    cell = Cell("synthetic", "profiler_watch.build", "tiny", "layer", "torch")
    result = measure_cell(cell.as_dict(), MeasureSettings("cpu", warmup_steps=2, steps=3, profile_steps=2))
    assert result.status == "ok" and result.profile["steps"] == 2
    timed = [seconds for seconds, _ in result.samples]
    assert len(timed) == 5
    assert profiler_watch.STEPS[-2:] == [True, True]
    assert not any(profiler_watch.STEPS[:-2]) and len(profiler_watch.STEPS) >= 2 + len(timed)
