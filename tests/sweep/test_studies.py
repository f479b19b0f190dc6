"""The docs' other studies through the harness: attention backends and compilation as axes of the sweep, their tables, and their bad values refused in one line."""

import json
import re

import pytest

from tests.support.sweeps import FAST, query, run_sweep


def test_the_attention_axis_through_the_sweep_and_its_table(tmp_path):
    from sweep.cli import main

    db = tmp_path / "a.db"
    done = run_sweep(
        db, "sweep=none", "family=flux1", "preset=tiny", "mode=none,layer", "attention=math,flash,efficient",
        "measure.numerics=true", *FAST,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = query(
        db,
        "select mode, json_extract(config, '$.attention'), status, attention_backend, grad_rel_error, reason "
        "from cells",
    )
    by = {(mode, asked): rest for mode, asked, *rest in rows}
    assert by[("none", "math")][:3] == ["ok", "math", 0.0]
    assert by[("layer", "flash")][:2] == ["ok", "flash"] and 0 < by[("layer", "flash")][2] < 1e-4
    status, ran, error, reason = by[("none", "efficient")]
    assert status == "unsupported" and ran is None and reason.startswith("attention=efficient: no efficient")
    out = tmp_path / "reports"
    main(["report", "--db", f"sqlite:///{db}", "--out", str(out)])
    page = (out / "flux1.md").read_text()
    table = page[page.index("attention backends") :].split("\nRan:")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[5:] if line.startswith("|")]
    assert [r[:3] for r in rows] == [
        ["none", "efficient", ""], ["none", "flash", "flash"], ["none", "math", "math"],
        ["layer", "efficient", ""], ["layer", "flash", "flash"], ["layer", "math", "math"],
    ]  # fmt: skip
    assert rows[0][3] == "unsupported" and rows[0][6].startswith("attention=efficient")
    assert rows[2][5] == "0" and float(rows[1][5]) > 0


def test_a_bad_attention_value_is_refused_in_one_line(tmp_path):
    done = run_sweep(tmp_path / "a.db", "sweep=none", "preset=tiny", "mode=none", "attention=fast", *FAST)
    assert done.returncode != 0
    assert done.stderr.strip() == (
        "ckpt-sweep: attention=fast: unknown value 'fast'; did you mean 'flash'? valid: auto, math, flash, efficient, cudnn"
    )
    assert not (tmp_path / "a.db").exists()


def test_settle_steps_count_the_steps_before_times_settle():
    from sweep.store.results import step_statistics

    samples = [(20.0, True), (1.3, True), (1.1, True), (1.0, False), (1.0, False), (0.9, False)]
    statistics = step_statistics(samples)
    assert statistics["first_step_s"] == 20.0 and statistics["sec_per_step"] == 1.0
    assert statistics["settle_steps"] == 2  # 1.3 s is over 1.25 x sec/step; 1.1 s is within
    assert step_statistics([(1.0, True)])["settle_steps"] is None  # no measured steps: nothing to settle to


@pytest.mark.long
def test_the_compile_axis_through_the_sweep_and_its_table(tmp_path):
    """Through the fork server, as a user runs it: compiled cells compile cold in a cache of their
    own (the user's stays untouched), their first step shows the compile, their gradients match."""
    from sweep.cli import main
    from tests.support.sweeps import FAST, query, run_sweep

    db, users_cache = tmp_path / "c.db", tmp_path / "users-inductor-cache"
    done = run_sweep(
        db, "sweep=none", "preset=tiny", "mode=layer", "compile=none,regional", "measure.numerics=true",
        *FAST, extra_env={"TORCHINDUCTOR_CACHE_DIR": str(users_cache)}, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = query(
        db,
        "select mode, json_extract(config, '$.compile'), status, first_step_s, sec_per_step, settle_steps, "
        "grad_rel_error, report from cells",
    )
    by = {(mode, compiled): rest for mode, compiled, *rest in rows}
    assert len(by) == 2 and {r[0] for r in by.values()} == {"ok"}
    status, first, steady, settled, error, report = by[("layer", "regional")]
    assert first > 5 * steady and settled >= 1  # the first step compiled
    assert error < 1e-4
    assert json.loads(report)["regions_run"] == json.loads(by[("layer", "none")][5])["regions_run"] == 8
    assert not users_cache.exists() or not any(users_cache.rglob("*.so")), "a cell compiled into the user's cache"
    out = tmp_path / "reports"
    main(["report", "--db", f"sqlite:///{db}", "--out", str(out)])
    page = (out / "synthetic.md").read_text()
    table = page[page.index("compilation, tiny") :].split("\nsec/step / peak:")[0]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    assert [c.strip() for c in lines[0].strip("|").split("|")] == [
        "Mode", "eager: sec/step / peak", "eager: first step", "regional: sec/step / peak", "regional: first step",
    ]  # fmt: skip
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["Torch layer"]
    assert all(re.search(r"\+\d+\.\d s, settled at step [1-9]", line.split("|")[5]) for line in lines[2:])
    main(["diff", "1", "1", "--db", f"sqlite:///{db}", "--out", str(tmp_path / "diff")])
    shown = next((tmp_path / "diff").glob("*.md")).read_text()
    header = next(line for line in shown.splitlines() if line.startswith("| family"))
    assert "first step CPU" in header and "grad error CPU" in header
    compiled = next(line for line in shown.splitlines() if "layer (compile regional)" in line)
    assert f"{by[('layer', 'regional')][1]:.2f} s" in compiled


@pytest.mark.parametrize(
    "override, message",
    [
        ("compile=regional,max", "compile=regional,max: unknown value 'max'; valid: none, regional, full"),
        ("dtype=fp64", "dtype=fp64: unknown value 'fp64'; did you mean 'fp16'? valid: auto, bf16, fp16, fp32"),
        ("run.rerun=some", "run.rerun=some: unknown value 'some'; valid: none, failed, all"),
    ],
    ids=["compile", "dtype", "run.rerun"],
)
def test_a_word_an_enum_does_not_know_is_refused_in_one_line(tmp_path, override, message):
    from tests.support.sweeps import FAST, run_sweep

    done = run_sweep(tmp_path / "c.db", "sweep=none", "preset=tiny", "mode=none", override, *FAST)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == f"ckpt-sweep: {message}"
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "c.db").exists()


def test_a_compiled_cell_is_not_predicted_as_if_eager():
    from dataclasses import asdict

    from sweep.config.cell import Cell
    from sweep.run.scenarios.predict import PredictSettings, predict_cell

    cell = Cell("synthetic", "ckptlib.synthetic.build", "tiny", "layer", "torch", compile="regional")
    result = predict_cell(asdict(cell), PredictSettings("cuda"))
    assert result.status == "unsupported" and result.reason.startswith("compile=regional: a prediction runs")
    assert predict_cell(asdict(Cell(**{**asdict(cell), "compile": "none"})), PredictSettings("cuda")).status == "ok"
