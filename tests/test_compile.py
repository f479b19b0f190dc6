"""torch.compile under every checkpointing schedule (ckptlib/compile.py): Inductor on the CPU, the
compiled step's loss and gradients close to eager, the report's counters those of the plan."""

import json
import re

import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config

import ckptlib
from ckptlib import MODES, CheckpointConfig, UnsupportedModeError, synthetic
from ckptlib.compile import COMPILE_MODES, Compiler
from ckptlib.families import build

if reason := Compiler("regional").unavailable("cpu"):
    pytest.skip(f"compile=regional cannot run here: {reason}", allow_module_level=True)

# what the plan did, as opposed to which tensors a graph happened to save (the compiler's choice)
SCHEDULE_COUNTERS = (
    "plans",
    "regions_run",
    "blocks_recomputed",
    "ffn_regions_run",
    "ffn_recomputed",
    "attention_regions_offloaded",
    "attention_offload_skipped",
)
FIRST_BLOCKS = CheckpointConfig("unsloth", blocks=3)  # the non-uniform form: only the first k blocks


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each case compiles from scratch (no graph of an earlier case, no recompile limit reached);
    dropout draws as in eager, so gradients can be compared."""
    torch._dynamo.reset()
    with inductor_config.patch(fallback_random=True):
        yield
    torch._dynamo.reset()


def train_step(builder, preset, config, compile, **shape):
    work = builder(preset, training="full", **shape)
    work.optimizer = None  # keep the gradients for comparison
    config = CheckpointConfig(**{**vars(config), "min_offload_bytes": 0})  # tiny tensors offload too
    handle = ckptlib.apply(work.model, config, work.spec, compile=compile)
    torch.manual_seed(0)  # the same dropout draws
    torch._dynamo.utils.counters.clear()
    loss = work.step()
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    grads = {n: p.grad for n, p in work.model.named_parameters() if p.grad is not None}
    return loss, grads, handle.report, graphs


def assert_compiled_matches_eager(builder, preset, config, compile):
    loss, grads, report, _ = train_step(builder, preset, config, "none")
    compiled_loss, compiled_grads, compiled_report, graphs = train_step(builder, preset, config, compile)
    assert graphs > 0, "nothing was compiled"
    torch.testing.assert_close(compiled_loss, loss, rtol=1e-5, atol=1e-6)
    assert compiled_grads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
    for counter in SCHEDULE_COUNTERS:
        assert getattr(compiled_report, counter) == getattr(report, counter), counter
    if config.offloads_regions or report.attention_regions_offloaded:
        assert compiled_report.offload["tensors_offloaded"] > 0
        assert compiled_report.offload["tensors_reloaded"] == compiled_report.offload["tensors_offloaded"]


SYNTHETIC_CASES = {**MODES, "unsloth-first3": FIRST_BLOCKS}


# every backend and schedule compiled regionally; under full compilation, one of each backend
FULL_CASES = ["none", "seg2-stride4-offload", "unsloth", "torch-ffn-offload", "unsloth-ffn"]
CASES = [(mode, "regional") for mode in SYNTHETIC_CASES] + [(mode, "full") for mode in FULL_CASES]


@pytest.mark.parametrize("mode, compile", CASES)
def test_synthetic_compiled_step_matches_eager(mode, compile):
    assert_compiled_matches_eager(synthetic.build, "tiny", SYNTHETIC_CASES[mode], compile)


def flux1(preset, **kwargs):
    return build("flux1", preset, **kwargs)


@pytest.mark.parametrize("mode", ["layer", "seg2-stride4-offload", "unsloth", "torch-ffn-offload", "unsloth-ffn"])
def test_flux_compiled_step_matches_eager(mode):
    """A real family's two block lists under regional compilation, one schedule of each backend."""
    assert_compiled_matches_eager(flux1, "tiny", MODES[mode], "regional")


def test_identical_blocks_share_one_graph():
    """Regional compilation compiles a block once, not once per block: its cost does not grow with depth."""
    *_, shallow = train_step(synthetic.build, "tiny", MODES["layer"], "regional", depth=2)
    torch._dynamo.reset()
    *_, deep = train_step(synthetic.build, "tiny", MODES["layer"], "regional", depth=12)
    assert 0 < deep == shallow


def test_remove_restores_the_eager_model():
    work = synthetic.build("tiny", training="full")
    forwards = [block.forward for block in work.model.blocks]
    handle = ckptlib.apply(work.model, MODES["seg2-stride4-offload"], work.spec, compile="full")
    handle.remove()
    assert "forward" not in work.model.__dict__
    assert all("forward" not in m.__dict__ for m in work.model.modules())
    assert [block.forward for block in work.model.blocks] == forwards


def test_without_a_cpp_compiler_compiling_is_unsupported():
    work = synthetic.build("tiny")
    with (
        inductor_config.patch({"cpp.cxx": ("no-such-c++-compiler",)}),
        pytest.raises(UnsupportedModeError, match="compile regional: Inductor compiles CPU kernels with a C"),
    ):
        ckptlib.apply(work.model, MODES["layer"], work.spec, compile="regional")
    assert all("forward" not in m.__dict__ for m in work.model.modules()), "a refused apply patched the model"


def test_unknown_compile_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown compile mode 'max'; valid modes: none, regional, full"):
        Compiler("max")
    assert COMPILE_MODES == ("none", "regional", "full")


def test_settle_steps_count_the_steps_before_times_settle():
    from sweep.store.results import step_statistics

    samples = [(20.0, True), (1.3, True), (1.1, True), (1.0, False), (1.0, False), (0.9, False)]
    statistics = step_statistics(samples)
    assert statistics["first_step_s"] == 20.0 and statistics["sec_per_step"] == 1.0
    assert statistics["settle_steps"] == 2  # 1.3 s is over 1.25 x sec/step; 1.1 s is within
    assert step_statistics([(1.0, True)])["settle_steps"] is None  # no measured steps: nothing to settle to


def test_the_compile_axis_through_the_sweep_and_its_table(tmp_path):
    """Through the fork server, as a user runs it: compiled cells compile cold in a cache of their
    own (the user's stays untouched), their first step shows the compile, their gradients match."""
    from sweep.cli import main
    from tests.sweep_helpers import FAST, query, run_sweep

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
        ("dtype=fp64", "dtype=fp64: unknown value 'fp64'; valid: auto, bf16, fp16, fp32"),
        ("run.rerun=some", "run.rerun=some: unknown value 'some'; valid: none, failed, all"),
    ],
    ids=["compile", "dtype", "run.rerun"],
)
def test_a_word_an_enum_does_not_know_is_refused_in_one_line(tmp_path, override, message):
    from tests.sweep_helpers import FAST, run_sweep

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
