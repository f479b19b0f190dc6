"""The quantization axis: each CPU-capable scheme really stores int8 weights and still trains
LoRA; CUDA-only schemes and missing packages are `unsupported` with the reason."""

import pytest
import torch

import ckptlib
from ckptlib import UnsupportedModeError, synthetic
from ckptlib.memory import step_peak
from ckptlib.quantize import QUANTIZATIONS, base_weight_bytes, check_supported

CPU_SCHEMES = [name for name, q in QUANTIZATIONS.items() if not q.needs_cuda]
CUDA_ONLY = [name for name, q in QUANTIZATIONS.items() if q.needs_cuda]


def trained(quantization):
    work = synthetic.build("tiny-wide", training="lora", dtype=torch.bfloat16, quantization=quantization)
    work.optimizer = None  # keep the gradients to look at
    ckptlib.apply(work.model, ckptlib.CheckpointConfig("torch"), work.spec)
    return work, work.step()


@pytest.fixture(scope="module")
def bf16_bytes():
    return base_weight_bytes(synthetic.build("tiny-wide", dtype=torch.bfloat16).model)


@pytest.mark.parametrize("name", CPU_SCHEMES)
def test_int8_base_halves_the_weights_and_still_trains_lora(name, bf16_bytes):
    work, loss = trained(name)
    assert 0.45 <= base_weight_bytes(work.model) / bf16_bytes <= 0.6  # int8 values plus scales
    assert torch.isfinite(loss)
    lora_b = [p.grad for n, p in work.model.named_parameters() if "lora_B" in n]
    assert len(lora_b) == 2 * 8 and all(g is not None and g.abs().sum() > 0 for g in lora_b)
    assert not any(p.requires_grad for n, p in work.model.named_parameters() if "lora_" not in n)


def test_none_leaves_the_base_in_bf16(bf16_bytes):
    work = synthetic.build("tiny-wide", dtype=torch.bfloat16)
    assert bf16_bytes == sum(p.numel() * 2 for n, p in work.model.named_parameters() if "lora_" not in n)


def tracked_parameter_bytes(quantization):
    work = synthetic.build("tiny-wide", training="lora", dtype=torch.bfloat16, quantization=quantization)
    return step_peak(work).peak_by_category["parameters"]


@pytest.mark.parametrize("name", CPU_SCHEMES)
def test_the_memory_tracker_counts_quantized_weights_by_their_storage(name):
    """A quantized weight is a tensor subclass whose logical size is bf16: the tracker counts its int8 data."""
    assert tracked_parameter_bytes(name) < 0.6 * tracked_parameter_bytes("none")


@pytest.mark.parametrize("name", CUDA_ONLY)
def test_cuda_only_schemes_are_unsupported_on_cpu_with_the_reason(name):
    with pytest.raises(UnsupportedModeError, match=f"^{name} needs a CUDA GPU; this cell runs on cpu$"):
        synthetic.build("tiny", quantization=name)


def test_bad_combinations_are_rejected():
    with pytest.raises(ValueError, match="unknown quantization 'int4'; valid: none, int8-torchao"):
        check_supported("int4", "cpu")
    with pytest.raises(UnsupportedModeError, match="a quantized base does not train in full"):
        synthetic.build("tiny", training="full", quantization="int8-torchao")


@pytest.mark.long
@pytest.mark.parametrize(
    "name, mode", [("int8-torchao", "none"), ("int8-sdnq", "torch"), ("int8-sdnq-hadamard", "none")]
)
def test_a_quantized_base_is_predicted_as_it_measures(name, mode):
    """Predictions quantize the meta model with the scheme's own code: its int8 weights, and the
    dequantized copies its matmuls save for backward, are those of a measured step."""
    from ckptlib.predict import predict
    from tests.ckptlib.test_predict import measured_peak

    kwargs = {"preset": "tiny-wide", "dtype": torch.bfloat16, "quantization": name}
    config = ckptlib.CheckpointConfig(mode)
    measured = measured_peak(synthetic.build, config, "lora", **kwargs)
    predicted = predict(synthetic.build, config, "cpu", training="lora", **kwargs)
    unquantized = predict(synthetic.build, config, "cpu", training="lora", **{**kwargs, "quantization": "none"})
    assert predicted.breakdown["parameters"] == measured.peak_by_category["parameters"]
    assert predicted.breakdown["parameters"] < 0.6 * unquantized.breakdown["parameters"]
    assert abs(predicted.peak_bytes / measured.peak_bytes - 1) <= 0.05, (predicted.peak_bytes, measured.peak_bytes)


def test_a_meta_model_is_quantized_as_torchaos_quantize_would_layer_by_layer():
    """NOTE [ A meta weight is quantized once per shape ]: each layer's weight is what quantize_ gives
    it (type, the plain tensors inside it, the layer's repr), with storages of its own."""
    from torchao import quantization

    from ckptlib.families import get
    from ckptlib.memory import plain_tensors, storage_id

    def layout(model):
        return {
            name: (type(p), [(t.shape, t.dtype, t.stride()) for t in plain_tensors(p)], p.requires_grad)
            for name, p in model.named_parameters()
        }

    direct, memo = (get("flux1").build_meta("tiny", buffers_on_meta=True).to(torch.bfloat16) for _ in range(2))
    quantization.quantize_(direct, quantization.Int8WeightOnlyConfig())
    QUANTIZATIONS["int8-torchao"].quantize(memo)
    assert layout(memo) == layout(direct)
    assert [repr(m) for m in memo.modules()] == [repr(m) for m in direct.modules()]
    storages = [storage_id(t) for p in memo.parameters() for t in plain_tensors(p)]
    assert len(set(storages)) == len(storages), "layers share a quantized weight's storage"
    assert sum(isinstance(p, quantization.Int8Tensor) for p in memo.parameters()) > 4  # several of each shape
