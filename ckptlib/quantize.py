"""Quantized base weights: the frozen Linear weights of a family stored in int8 or fp8 by TorchAO
or SDNQ, before LoRA adapters are attached (PEFT wraps the quantized layers).

Each scheme declares what it needs; `check_supported` names what is missing (no silent bf16 run).
The registry imports no torch: a report that names precisions reads it without loading torch.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .spec import UnsupportedModeError

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass(frozen=True)
class Quantization:
    name: str  # the config value (quantization=int8-torchao)
    label: str  # the precision a report row names: int8 (TorchAO)
    package: str  # import name of the library that does the work
    quantize: Callable[[nn.Module], None]  # in place, on the frozen base model
    needs_cuda: bool = False
    min_capability: tuple[int, int] | None = None  # CUDA compute capability
    cpu_environment: tuple[tuple[str, str], ...] = ()  # set before the package is first imported on a CPU
    # SimpleTuner's config keys for the same scheme (simpletuner/helpers/training/quantisation/):
    # its "fp8-torchao" is Float8DynamicActivationFloat8WeightConfig, its "fp8wo-torchao" this
    # project's weight-only fp8-torchao.
    simpletuner: tuple[tuple[str, object], ...] = ()

    @property
    def simpletuner_row(self) -> str:
        """How SimpleTuner's docs' tables name this scheme's rows: its base_model_precision, with
        -hadamard for SDNQ's Hadamard rotation."""
        keys = dict(self.simpletuner)
        return str(keys["base_model_precision"]) + ("-hadamard" if keys.get("sdnq_use_hadamard") else "")


def _torchao(config_name: str) -> Callable[[nn.Module], None]:
    def quantize(model: nn.Module) -> None:
        from torchao import quantization

        config = getattr(quantization, config_name)()
        if all(p.is_meta for p in model.parameters()):
            _quantize_meta_once_per_shape(model, config)
        else:
            quantization.quantize_(model, config)

    return quantize


# NOTE [ A meta weight is quantized once per shape ]: on the meta device a quantized weight holds no
# values, only the metadata TorchAO derives from the weight's shape and dtype (its int8 data and
# scales, their shapes, dtypes and strides). So of the Linear layers TorchAO's quantize_ would
# convert, one per (class, weight shape, dtype, bias) is quantized by quantize_ itself, and each other
# gets a deep copy of that one's weight (its own storages: the predictor counts every weight's
# bytes) and whatever else quantize_ set on the layer (its extra_repr). Flux.1 dev's 504 layers, under
# cProfile: 2.8 s of meta kernels -> 0.18 s. A real (non-meta) model is quantized by quantize_ layer by layer.
def _quantize_meta_once_per_shape(model: nn.Module, config) -> None:
    import copy
    import inspect
    import types

    from torchao.quantization import quantize_

    converts = inspect.signature(quantize_).parameters["filter_fn"].default  # which layers quantize_ takes
    before = {}  # layer -> its attributes before quantize_
    firsts: dict[tuple, nn.Module] = {}

    def first_of_its_shape(module: nn.Module, fqn: str) -> bool:
        if not converts(module, fqn):
            return False
        key = (type(module), tuple(module.weight.shape), module.weight.dtype, module.bias is None)
        before[module] = (key, set(module.__dict__))
        return firsts.setdefault(key, module) is module

    quantize_(model, config, filter_fn=first_of_its_shape)
    for module, (key, attributes) in before.items():
        first = firsts[key]
        if first is module:
            continue
        module.weight = copy.deepcopy(first.weight)
        for name, value in first.__dict__.items():
            if name not in attributes:  # what quantize_ added to the layer
                bound = isinstance(value, types.MethodType) and value.__self__ is first
                setattr(module, name, types.MethodType(value.__func__, module) if bound else value)


def _sdnq(use_hadamard: bool) -> Callable[[nn.Module], None]:
    def quantize(model: nn.Module) -> None:
        # The training variant: SDNQ's inference layers run without autograd, so nothing upstream
        # of them would get a gradient.
        from sdnq.training import sdnq_training_post_load_quant

        sdnq_training_post_load_quant(model, weights_dtype="int8", use_hadamard=use_hadamard, add_skip_keys=False)

    return quantize


QUANTIZATIONS: dict[str, Quantization] = {
    q.name: q
    for q in (
        Quantization(
            "int8-torchao",
            "int8 (TorchAO)",
            "torchao",
            _torchao("Int8WeightOnlyConfig"),
            simpletuner=(("base_model_precision", "int8-torchao"),),
        ),
        Quantization(
            "fp8-torchao",
            "fp8 (TorchAO)",
            "torchao",
            _torchao("Float8WeightOnlyConfig"),
            needs_cuda=True,
            min_capability=(8, 9),
            simpletuner=(("base_model_precision", "fp8wo-torchao"),),
        ),
        # On CPU, SDNQ's torch.compile'd kernels run eagerly: compiling them takes minutes on 2 cores,
        # and the CPU memory tracker (a dispatch mode) cannot run compiled code.
        Quantization(
            "int8-sdnq",
            "int8 (SDNQ)",
            "sdnq",
            _sdnq(use_hadamard=False),
            cpu_environment=(("SDNQ_USE_TORCH_COMPILE", "0"),),
            simpletuner=(("base_model_precision", "int8-sdnq"),),
        ),
        Quantization(
            "int8-sdnq-hadamard",
            "int8 (SDNQ, Hadamard)",
            "sdnq",
            _sdnq(use_hadamard=True),
            cpu_environment=(("SDNQ_USE_TORCH_COMPILE", "0"),),
            simpletuner=(("base_model_precision", "int8-sdnq"), ("sdnq_use_hadamard", True)),
        ),
    )
}
NAMES = ("none", *QUANTIZATIONS)


def precision_label(quantization: str, dtype: str) -> str:
    """What a report row says the base weights were: the training dtype (bf16, fp32) unquantized,
    else the scheme (int8 (TorchAO))."""
    if quantization == "none":
        return dtype
    return QUANTIZATIONS[quantization].label if quantization in QUANTIZATIONS else quantization


def check_supported(name: str, device: str | torch.device) -> None:
    """UnsupportedModeError naming what this device or environment lacks for `name`."""
    if name == "none":
        return
    if name not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {name!r}; valid: {', '.join(NAMES)}")
    import torch

    scheme, device = QUANTIZATIONS[name], torch.device(device)
    if scheme.needs_cuda and device.type not in ("cuda", "meta"):
        raise UnsupportedModeError(f"{name} needs a CUDA GPU; this cell runs on {device.type}")
    if (
        scheme.min_capability
        and device.type == "cuda"
        and torch.cuda.get_device_capability(device) < scheme.min_capability
    ):
        have = ".".join(map(str, torch.cuda.get_device_capability(device)))
        need = ".".join(map(str, scheme.min_capability))
        raise UnsupportedModeError(f"{name} needs compute capability {need} or newer; this GPU has {have}")
    if device.type in ("cpu", "meta"):  # meta: a prediction's build
        for key, value in scheme.cpu_environment:
            if key not in os.environ:
                os.environ[key] = value
                _SET_FOR_CPU.add(key)
    try:
        importlib.import_module(scheme.package)
    except ImportError as error:
        raise UnsupportedModeError(
            f"{name} needs the {scheme.package} package (pip install 'ckpt-sweep[quant]'): {error}"
        ) from None


_SET_FOR_CPU: set[str] = set()  # environment keys this process set itself for a CPU or meta build


def inherited_environment() -> dict[str, str]:
    """This process's environment without what it set for its own CPU or meta builds: what a child
    that builds for another device (a plan's measured verification on a GPU) should start from."""
    return {key: value for key, value in os.environ.items() if key not in _SET_FOR_CPU}


def quantize_base(model: nn.Module, name: str, device: str | torch.device) -> None:
    """Quantize the (frozen) base weights of `model` in place."""
    check_supported(name, device)
    if name != "none":
        QUANTIZATIONS[name].quantize(model)


def is_quantized(model: nn.Module) -> bool:
    """Whether any weight of `model` is a quantized tensor (a wrapper subclass: TorchAO, SDNQ)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    return any(is_traceable_wrapper_subclass(p) for p in model.parameters())


def base_weight_bytes(model: nn.Module) -> int:
    """Storage bytes of the model's weights and buffers, LoRA adapters excluded."""
    from .memory import plain_tensors

    seen, total = set(), 0
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if "lora_" in name or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += sum(plain.untyped_storage().nbytes() for plain in plain_tensors(tensor))
    return total
