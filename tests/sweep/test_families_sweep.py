"""Every family through the harness: the families-tiny sweep."""

import pytest

from tests.ckptlib.test_families import BUILDABLE, FAMILIES, handle_free_spec


@pytest.mark.long
def test_tiny_sweep_over_all_families_has_no_failures(tmp_path):
    """The families-tiny sweep through the real console script, every family under a grouped-region
    mode (every mode is covered in-process above, and each family trains in bf16 below):
    every cell ok, unsupported (with its reason) or invalid; never failed, crashed or timed out."""
    from tests.support.sweeps import query, run_sweep

    db = tmp_path / "families.db"
    done = run_sweep(
        db, "sweep=families-tiny", "mode=interval2", "measure.warmup_steps=0", "measure.steps=1", timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert query(db, "select count(*) from cells") == [(len(FAMILIES),)]
    statuses = dict(query(db, "select status, count(*) from cells group by status"))
    assert set(statuses) <= {"ok", "unsupported", "invalid"}, statuses
    # interval 2 runs where a family's lists can be grouped, or where SimpleTuner's model of it picks
    # single blocks (the docs' column as it wires it: no grouping needed)
    grouped = [
        n
        for n in BUILDABLE
        if None not in handle_free_spec(n).conventions.values() or FAMILIES[n].wiring.interval_regions == "blocks"
    ]
    assert statuses["ok"] == len(grouped)
    assert query(db, "select count(*) from cells where family = 'flux1' and tokens = 16 and height = 64") == [(1,)]
    assert query(db, "select count(*) from cells where status = 'unsupported' and (reason is null or reason = '')") == [
        (0,)
    ]
