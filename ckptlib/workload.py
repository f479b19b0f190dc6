"""A ready-to-run training step: what every family builds and what a sweep cell measures."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .adapters import LoKr, inject_lokr
from .names import TRAINING_MODES
from .quantize import quantize_base
from .spec import BlockSpec, SpecError, UnsupportedModeError


@dataclass
class Workload:
    """One model, its block spec, fixed inputs and a flow-matching-style MSE step."""

    model: nn.Module
    spec: BlockSpec
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    target: torch.Tensor | None = None
    optimizer: torch.optim.Optimizer | None = None
    grad_inputs: tuple[torch.Tensor, ...] = ()  # inputs that collect gradients (frozen training)
    # keyword inputs the model reads in Python (a caption mask's lengths): built on the meta device,
    # they are CPU tensors, and a prediction keeps them so (NOTE [ Inputs read in Python ])
    host_inputs: tuple[str, ...] = ()
    # masks made of those values meet activations outside an index (predict.HostMasksMeetMeta)
    host_masks: bool = False

    def step(self) -> torch.Tensor:
        for t in self.grad_inputs:
            t.grad = None
        out = prediction(self.model(*self.args, **self.kwargs))
        self._draw_target(out)
        loss = F.mse_loss(out.float(), self.target.float())
        loss.backward()
        if self.optimizer is not None:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def settle(self) -> None:
        """What a first step leaves for every later one, without the step: the target (drawn from
        a forward without autograd) and the optimizer's state (a step on zero gradients). Predictions
        settle instead of stepping: same state, a third of the work."""
        self.draw_target()
        if self.optimizer is not None:
            for group in self.optimizer.param_groups:
                for p in group["params"]:
                    p.grad = torch.zeros_like(p)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

    def draw_target(self) -> None:
        """The target a first step would draw, drawn now (from a forward without autograd)."""
        if self.target is None:
            with torch.no_grad():
                self._draw_target(prediction(self.model(*self.args, **self.kwargs)))

    def _draw_target(self, out: torch.Tensor) -> None:
        if self.target is None:  # the prediction's shape is the family's business: draw it once
            generator = seeded_generator(out.device, 1234)
            self.target = random_normal(out.shape, out.device, out.dtype, generator)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def prediction(output) -> torch.Tensor:
    """The denoiser's prediction from whatever a model returns: a tensor, a tuple whose first item
    is it, or a per-sample list (Z-Image)."""
    while isinstance(output, (tuple, list)) and not isinstance(output[0], torch.Tensor):
        output = output[0]
    if isinstance(output, (tuple, list)):
        if isinstance(output, list) and len(output) > 1 and all(isinstance(o, torch.Tensor) for o in output):
            return torch.stack(output)
        output = output[0]
    return output


def default_dtype(device: str | torch.device) -> torch.dtype:
    """bf16 where training runs in it (accelerators), fp32 on CPU."""
    return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16


# NOTE [ Building to inspect ]: the harness builds a model of one's own on the meta device in the
# process that starts a sweep (its spec and LoRA targets checked before any cell, its structure
# fingerprinted for each cell), a process that measures nothing itself. Under
# `adapters_not_injected()` a LoRA build checks its targets and stops short of injecting the
# adapters: importing PEFT costs that process about 3.5 s of CPU (transformers, dynamo, torchao),
# and the cells, which do inject them, run in a fork server that has PEFT imported already.
_inject_adapters = contextvars.ContextVar("inject_adapters", default=True)


@contextlib.contextmanager
def adapters_not_injected():
    """LoRA builds inside check their targets and inject no adapters (NOTE [ Building to inspect ])."""
    token = _inject_adapters.set(False)
    try:
        yield
    finally:
        _inject_adapters.reset(token)


def make_trainable(
    model: nn.Module,
    training: str,
    lora_targets: list[str],
    lora_rank: int,
    quantization: str = "none",
    lora_dropout: float = 0.0,
    lokr: LoKr | None = None,
) -> nn.Module:
    """Set which weights train: LoRA adapters (PEFT), or LoKr ones (ckptlib.adapters), on a frozen
    base, nothing, or everything.
    A quantized base (ckptlib.quantize) is quantized before the adapters wrap its layers."""
    if training not in TRAINING_MODES:
        raise ValueError(f"unknown training mode {training!r}; valid modes: {', '.join(TRAINING_MODES)}")
    model.requires_grad_(training == "full")
    if quantization != "none":
        if training == "full":
            raise UnsupportedModeError(f"{quantization}: a quantized base does not train in full; use lora or frozen")
        quantize_base(model, quantization, next(model.parameters()).device)
    if training == "lora":
        _check_targets(model, lora_targets)
        if not _inject_adapters.get():
            return model
        if lokr is not None:
            return inject_lokr(model, lokr)
        from peft import LoraConfig, inject_adapter_in_model

        dtype = next(model.parameters()).dtype
        model = inject_adapter_in_model(
            LoraConfig(r=lora_rank, lora_alpha=lora_rank, lora_dropout=lora_dropout, target_modules=lora_targets),
            model,
        )
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.data = param.data.to(dtype)
    return model


def _check_targets(model: nn.Module, targets: list[str]) -> None:
    """SpecError naming the LoRA targets that match no module (PEFT matches a target as
    a module name or its dotted end), and the model's Linear layers it could have named."""
    names = [name for name, _ in model.named_modules()]
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        linear = sorted({n.rpartition(".")[2] for n, m in model.named_modules() if isinstance(m, nn.Linear)})
        raise SpecError(
            f"LoRA target(s) {', '.join(map(repr, missing))} match no module of the model "
            f"(its Linear layers are named {', '.join(linear[:12])}{', ...' if len(linear) > 12 else ''})"
        )


def adamw_for(model: nn.Module, foreach: bool | None = None) -> torch.optim.Optimizer | None:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=1e-4, foreach=foreach) if params else None


def random_normal(
    shape, device: str | torch.device, dtype: torch.dtype, generator=None, requires_grad: bool = False
) -> torch.Tensor:
    """`torch.randn`; on meta (every builder check and prediction) `torch.empty`, which is the same
    tensor there: randn on meta runs torch's Python reference, whose first call imports sympy (0.3 s
    of every `ckpt-sweep run` that checks a builder), and randn_like also torch._dynamo (1 s)."""
    if torch.device(device).type == "meta":
        return torch.empty(shape, device=device, dtype=dtype, requires_grad=requires_grad)
    return torch.randn(shape, generator=generator, device=device, dtype=dtype, requires_grad=requires_grad)


def seeded_generator(device: str | torch.device, seed: int) -> torch.Generator:
    """A generator for drawing on `device`; a CPU one for meta tensors (predictions), which draw nothing."""
    device = torch.device(device)
    return torch.Generator(device="cpu" if device.type == "meta" else device).manual_seed(seed)
