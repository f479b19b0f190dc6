"""Attention backends: which SDPA kernel a step uses, forced or left to torch (`auto`), the one
that actually ran (checked, not assumed), and the numerics a backend and schedule give against an
fp32 math-backend reference of the same weights and inputs.

The docs' Qwen Image 2.1 study: native SDPA chose cuDNN on H200 and Flash on L40S; the gradients'
relative L2 error against the reference was 1.97e-6.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from .compile import Compiler
from .config import CheckpointConfig
from .names import ATTENTION_BACKENDS, ATTENTION_KERNELS
from .quantize import is_quantized
from .spec import UnsupportedModeError
from .workload import Workload

KERNELS = {name: getattr(SDPBackend, member) for name, member in ATTENTION_KERNELS.items()}

# The fused kernels' aten ops. The math backend is a composite: it decomposes into matmuls and a
# softmax, so an SDPA call that reached no fused op ran the math backend.
FUSED_OPS = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
}


NO_KERNEL = ("No available kernel", "No viable backend")  # torch's refusals of a forced kernel


def check_backend(name: str) -> None:
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; valid: {', '.join(ATTENTION_BACKENDS)}")


@contextlib.contextmanager
def attention_backend(name: str) -> Iterator[None]:
    """SDPA restricted to the named kernel (`auto`: torch chooses)."""
    check_backend(name)
    if name == "auto":
        yield
        return
    with sdpa_kernel([KERNELS[name]]):
        yield


class _SdpaCalls(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.scaled_dot_product_attention or getattr(func, "__name__", "") == "scaled_dot_product_attention":
            self.calls += 1
        return func(*args, **(kwargs or {}))


class _FusedOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ran: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        backend = FUSED_OPS.get(func._overloadpacket.__name__)
        if backend is not None:
            self.ran.append(backend)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def refused_kernels(name: str) -> Iterator[None]:
    """torch's refusal of a forced kernel as UnsupportedModeError naming it."""
    try:
        yield
    except RuntimeError as error:
        if not any(refusal in str(error) for refusal in NO_KERNEL):
            raise
        raise UnsupportedModeError(
            f"attention={name}: no {name} SDPA kernel here takes this model's attention "
            f"(device, dtype, dropout or mask; torch: {str(error).splitlines()[0]})"
        ) from None


@dataclass
class BackendsSeen:
    """The SDPA calls and fused kernels seen while `watching_backends` was on."""

    calls: _SdpaCalls
    fused: _FusedOps

    def text(self) -> str:
        """'flash', 'math', 'flash, math' for a model whose attentions took different kernels;
        'none' without an SDPA call."""
        if not self.calls.calls:
            return "none"
        kinds = set(self.fused.ran) | ({"math"} if len(self.fused.ran) < self.calls.calls else set())
        return ", ".join(sorted(kinds))


@contextlib.contextmanager
def watching_backends() -> Iterator[BackendsSeen]:
    """Which SDPA kernels the code run inside takes (a training step: sweep/run/scenarios/measure.py)."""
    seen = BackendsSeen(_SdpaCalls(), _FusedOps())
    with seen.calls, seen.fused:
        yield seen


@dataclass(frozen=True)
class Numerics:
    loss_rel_error: float
    grad_rel_error: float  # relative L2 error over every trainable gradient, concatenated


def numerics(work: Workload, config: CheckpointConfig, backend: str, apply, compile: str = "none") -> Numerics:
    """One step of `work` under `config`, `backend` and `compile`, against the same weights and
    inputs in fp32, unchanged model (no checkpointing, no compilation), math backend. Both run on
    copies: `work` is left as it was. `apply` is ckptlib.apply (passed in: this module is imported
    by it). A compiled step draws eager's dropout masks (Compiler.eager_random), so its error is
    the arithmetic's."""
    reference = _gradient_step(_copy(work, torch.float32), "math")
    candidate = _copy(work, None)
    with Compiler(compile).eager_random():
        apply(candidate.model, config, candidate.spec, compile=compile)
        measured = _gradient_step(candidate, backend)
    loss_ref, grads_ref = reference
    loss, grads = measured
    difference = torch.cat([(g - r).flatten() for g, r in zip(grads, grads_ref)])
    scale = torch.cat([r.flatten() for r in grads_ref]).norm()
    return Numerics(
        loss_rel_error=abs(loss - loss_ref) / abs(loss_ref) if loss_ref else abs(loss - loss_ref),
        grad_rel_error=float(difference.norm() / scale) if scale else float(difference.norm()),
    )


def _copy(work: Workload, dtype: torch.dtype | None) -> Workload:
    """A copy of `work` that does not step its optimizer (gradients are what is compared), its
    weights, inputs and target cast to `dtype` (None: as they are)."""
    work.draw_target()  # once, so that both copies train toward the same target
    copied = copy.deepcopy(work)
    copied.optimizer = None
    if dtype is None:
        return copied
    if is_quantized(copied.model):
        raise UnsupportedModeError("numerics: a quantized base has no fp32 reference of the same weights")
    nn.Module.to(copied.model, dtype)  # not a diffusers model's own .to(), which warns on every cast
    cast: dict[int, torch.Tensor] = {}

    def to_dtype(t):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        if id(t) not in cast:
            cast[id(t)] = t.detach().to(dtype).requires_grad_(t.requires_grad)
        return cast[id(t)]

    copied.args, copied.kwargs = tree_map(to_dtype, (copied.args, copied.kwargs))
    copied.grad_inputs = tuple(to_dtype(t) for t in copied.grad_inputs)
    copied.target = to_dtype(copied.target)
    return copied


def _gradient_step(work: Workload, backend: str) -> tuple[float, list[torch.Tensor]]:
    params = [p for p in work.model.parameters() if p.requires_grad] or list(work.grad_inputs)
    torch.manual_seed(0)  # the same dropout masks in both steps
    with refused_kernels(backend), attention_backend(backend):
        loss = float(work.step())
    grads = [torch.zeros_like(p, dtype=torch.float64) if p.grad is None else p.grad.double() for p in params]
    return loss, grads
