"""The quantization axis: each CPU-capable scheme really stores int8 weights and still trains
LoRA; CUDA-only schemes and missing packages are `unsupported` with the reason."""

import sys

import pytest
import torch

import ckptlib
from ckptlib import UnsupportedModeError, synthetic
from ckptlib.memory import step_peak
from ckptlib.quantize import QUANTIZATIONS, base_weight_bytes, check_supported

CPU_SCHEMES = [name for name, q in QUANTIZATIONS.items() if not q.needs_cuda]
CUDA_ONLY = [name for name, q in QUANTIZATIONS.items() if q.needs_cuda]


def trained(quantization):
    work = synthetic.build("cpu-256", training="lora", dtype=torch.bfloat16, quantization=quantization)
    work.optimizer = None  # keep the gradients to look at
    ckptlib.apply(work.model, ckptlib.CheckpointConfig("torch"), work.spec)
    return work, work.step()


@pytest.fixture(scope="module")
def bf16_bytes():
    return base_weight_bytes(synthetic.build("cpu-256", dtype=torch.bfloat16).model)


@pytest.mark.parametrize("name", CPU_SCHEMES)
def test_int8_base_halves_the_weights_and_still_trains_lora(name, bf16_bytes):
    work, loss = trained(name)
    assert 0.45 <= base_weight_bytes(work.model) / bf16_bytes <= 0.6  # int8 values plus scales
    assert torch.isfinite(loss)
    lora_b = [p.grad for n, p in work.model.named_parameters() if "lora_B" in n]
    assert len(lora_b) == 2 * 8 and all(g is not None and g.abs().sum() > 0 for g in lora_b)
    assert not any(p.requires_grad for n, p in work.model.named_parameters() if "lora_" not in n)


def test_none_leaves_the_base_in_bf16(bf16_bytes):
    work = synthetic.build("cpu-256", dtype=torch.bfloat16)
    assert bf16_bytes == sum(p.numel() * 2 for n, p in work.model.named_parameters() if "lora_" not in n)


def tracked_parameter_bytes(quantization):
    work = synthetic.build("cpu-256", training="lora", dtype=torch.bfloat16, quantization=quantization)
    return step_peak(work).peak_by_category["parameters"]


@pytest.mark.parametrize("name", CPU_SCHEMES)
def test_the_memory_tracker_counts_quantized_weights_by_their_storage(name):
    """A quantized weight is a tensor subclass whose logical size is bf16: the tracker counts its int8 data."""
    assert tracked_parameter_bytes(name) < 0.6 * tracked_parameter_bytes("none")


@pytest.mark.parametrize("name", CUDA_ONLY)
def test_cuda_only_schemes_are_unsupported_on_cpu_with_the_reason(name):
    with pytest.raises(UnsupportedModeError, match=f"^{name} needs a CUDA GPU; this cell runs on cpu$"):
        synthetic.build("tiny", quantization=name)


def test_a_missing_package_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "sdnq", None)  # import sdnq now raises ImportError
    with pytest.raises(
        UnsupportedModeError, match=r"int8-sdnq needs the sdnq package \(pip install 'ckpt-sweep\[quant\]'\)"
    ):
        check_supported("int8-sdnq", "cpu")


def test_bad_combinations_are_rejected():
    with pytest.raises(ValueError, match="unknown quantization 'int4'; valid: none, int8-torchao"):
        check_supported("int4", "cpu")
    with pytest.raises(UnsupportedModeError, match="a quantized base does not train in full"):
        synthetic.build("tiny", training="full", quantization="int8-torchao")


@pytest.mark.parametrize(
    "name, mode", [("int8-torchao", "none"), ("int8-sdnq", "torch"), ("int8-sdnq-hadamard", "none")]
)
def test_a_quantized_base_is_predicted_as_it_measures(name, mode):
    """Predictions quantize the meta model with the scheme's own code: its int8 weights, and the
    dequantized copies its matmuls save for backward, are those of a measured step."""
    from ckptlib.predict import predict
    from tests.test_predict import measured_peak

    kwargs = {"preset": "cpu-256", "dtype": torch.bfloat16, "quantization": name}
    config = ckptlib.CheckpointConfig(mode)
    measured = measured_peak(synthetic.build, config, "lora", **kwargs)
    predicted = predict(synthetic.build, config, "cpu", training="lora", **kwargs)
    unquantized = predict(synthetic.build, config, "cpu", training="lora", **{**kwargs, "quantization": "none"})
    assert predicted.breakdown["parameters"] == measured.peak_by_category["parameters"]
    assert predicted.breakdown["parameters"] < 0.6 * unquantized.breakdown["parameters"]
    assert abs(predicted.peak_bytes / measured.peak_bytes - 1) <= 0.05, (predicted.peak_bytes, measured.peak_bytes)


def test_quantization_axis_through_the_sweep(tmp_path):
    """Rows in the docs' order, weight bytes recorded, fp8 unsupported with its reason, versions kept.
    skip_predicted_oom predicts quantized cells and lets those that fit run."""
    from sweep.report.matrices import build_matrices
    from sweep.store.database import open_store
    from sweep.store.query import load_cells, select_runs
    from tests.sweep_helpers import query, run_sweep

    db = tmp_path / "q.db"
    done = run_sweep(
        db,
        "sweep=none",
        "preset=cpu-256",
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
    import os
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
