"""The quantization axis through the harness: every scheme a cell of the sweep, a missing package named, and a plan's measured run started without its meta builds' CPU settings."""

import os
import sys

import pytest

from ckptlib import UnsupportedModeError
from ckptlib.quantize import check_supported


def test_a_missing_package_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "sdnq", None)  # import sdnq now raises ImportError
    with pytest.raises(
        UnsupportedModeError, match=r"int8-sdnq needs the sdnq package \(pip install 'ckpt-sweep\[quant\]'\)"
    ):
        check_supported("int8-sdnq", "cpu")


def test_quantization_axis_through_the_sweep(tmp_path):
    """Rows in the docs' order, weight bytes recorded, fp8 unsupported with its reason, versions kept.
    skip_predicted_oom predicts quantized cells and lets those that fit run."""
    from sweep.report.matrices import build_matrices
    from sweep.store.database import open_store
    from sweep.store.query import load_cells, select_runs
    from tests.support.sweeps import query, run_sweep

    db = tmp_path / "q.db"
    done = run_sweep(
        db,
        "sweep=none",
        "preset=tiny-wide",
        "mode=none",
        "dtype=bf16",
        "measure.warmup_steps=0",
        "measure.steps=1",
        "quantization=int8-sdnq,fp8-torchao,none,int8-torchao",
        "skip_predicted_oom=true",
        "card_gib=1000",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {
        q: (status, weight, reason)
        for q, status, weight, reason in query(db, "select quantization, status, weight_bytes, reason from cells")
    }
    assert rows["fp8-torchao"] == ("unsupported", None, "fp8-torchao needs a CUDA GPU; this cell runs on cpu")
    assert {q: r[0] for q, r in rows.items()} == {
        "none": "ok",
        "int8-torchao": "ok",
        "int8-sdnq": "ok",
        "fp8-torchao": "unsupported",
    }
    assert rows["int8-torchao"][1] < 0.6 * rows["none"][1] and rows["int8-sdnq"][1] < 0.6 * rows["none"][1]
    [(environment,)] = query(db, "select environment from runs")
    assert '"torchao"' in environment and '"sdnq"' in environment
    engine = open_store(f"sqlite:///{db}")
    [matrix] = build_matrices(load_cells(engine, select_runs(engine)))
    assert list(matrix.frame["Precision"]) == ["bf16", "int8 (TorchAO)", "fp8 (TorchAO)", "int8 (SDNQ)"]
    engine.dispose()


def test_a_plans_measured_run_does_not_inherit_the_cpu_settings_of_its_meta_builds(monkeypatch):
    """A plan's predictions build SDNQ bases on meta with SDNQ's CPU setting (no torch.compile); its
    --verify run may measure on a GPU, so it starts from the environment without that setting."""
    import subprocess

    from ckptlib import quantize
    from sweep.plan import verify as plan_verify
    from sweep.plan.planning import Request

    monkeypatch.delenv("SDNQ_USE_TORCH_COMPILE", raising=False)
    monkeypatch.setattr(quantize, "_SET_FOR_CPU", set())
    quantize.check_supported("int8-sdnq", "meta")
    assert os.environ["SDNQ_USE_TORCH_COMPILE"] == "0"
    seen = {}

    def recorded(command, **kwargs):
        seen.update(kwargs["env"])
        return subprocess.CompletedProcess(command, 1, "", "stopped here")

    monkeypatch.setattr(plan_verify.subprocess, "run", recorded)
    request = Request("synthetic", "ckptlib.synthetic.build", "tiny", 2**20, "1 MiB", device="cpu")
    with pytest.raises(RuntimeError, match="stopped here"):
        plan_verify.measure(request, [], ["none"], "sqlite:///unused.db", "verify", 1, 0)
    assert "SDNQ_USE_TORCH_COMPILE" not in seen and seen["PATH"] == os.environ["PATH"]
    monkeypatch.setenv("SDNQ_USE_TORCH_COMPILE", "0")  # the user's own setting is theirs to keep
    monkeypatch.setattr(quantize, "_SET_FOR_CPU", set())
    quantize.check_supported("int8-sdnq", "meta")
    assert quantize.inherited_environment()["SDNQ_USE_TORCH_COMPILE"] == "0"
