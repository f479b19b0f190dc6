"""LyCORIS LoKr adapters as SimpleTuner's `*.lycoris-lokr` examples train them.

LoRA comes from PEFT (ckptlib.workload.make_trainable). LoKr is written here because what it saves
for backward is what the docs' LoKr rows measured, and PEFT's LoKr saves something else: NOTE [ LoKr
in bypass mode ].
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .spec import SpecError

# NOTE [ LoKr in bypass mode ]
# A LoKr adapter's weight is the Kronecker product of a small w1 (out_l x in_m) and a large w2
# (out_k x in_n; `full_matrix`: not itself low-rank). SimpleTuner's examples set LyCORIS's
# `bypass_mode`, which never builds that product: it splits the input's last dimension into
# (in_m, in_n), applies w2 to the in_n part and w1 to the in_m part. Backward therefore keeps the
# layer's input and a transposed intermediate of the layer's output size (the second matmul's
# input, made contiguous), per adapted layer and token; nothing of the weight's size. PEFT's LoKr
# rebuilds the product each forward and keeps it instead: weight-sized, token-independent. At the
# examples' shapes (thousands of tokens) the two differ by gigabytes, so the bypass form is what
# reproduces the published rows.


@dataclass(frozen=True)
class LoKr:
    """LyCORIS's `apply_preset`: every Linear layer inside a module of one of `factors`' classes
    (its `target_module`) gets a Kronecker adapter of that class's factor (its `module_algo_map`:
    each dimension splits into a part of at most the factor and the rest)."""

    factors: Mapping[str, int] = field(default_factory=lambda: {"Attention": 2, "FeedForward": 4})

    def targets(self, model: nn.Module) -> dict[str, int]:
        """Each adapted layer's name -> its factor."""
        modules = dict(model.named_modules())
        inside = {name + ".": self.factors[type(m).__name__] for name, m in modules.items()
                  if type(m).__name__ in self.factors}  # fmt: skip
        found = {
            name: next((f for owner, f in inside.items() if name.startswith(owner)), None)
            for name, m in modules.items()
            if isinstance(m, nn.Linear)
        }
        return {name: factor for name, factor in found.items() if factor is not None}


def factorization(dimension: int, factor: int) -> tuple[int, int]:
    """LyCORIS's split of a dimension into (small, large): `factor` itself where it divides the
    dimension, else the divisor pair closest to square whose small part is at most `factor`."""
    if dimension % factor == 0:
        return tuple(sorted((factor, dimension // factor)))
    small, large = 1, dimension
    while small < large:
        candidate = small + 1
        while dimension % candidate:
            candidate += 1
        if candidate > factor or candidate + dimension // candidate > small + large:
            break
        small, large = candidate, dimension // candidate
    return tuple(sorted((small, large)))


class KroneckerLinear(nn.Module):
    """A frozen Linear plus a LoKr adapter applied in bypass form (NOTE [ LoKr in bypass mode ])."""

    def __init__(self, base: nn.Linear, factor: int):
        super().__init__()
        self.base = base
        out_l, out_k = factorization(base.out_features, factor)
        in_m, in_n = factorization(base.in_features, factor)
        like = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.w1 = nn.Parameter(torch.empty(out_l, in_m, **like))
        self.w2 = nn.Parameter(torch.zeros(out_k, in_n, **like))  # LyCORIS starts the adapter at zero
        if self.w1.device.type != "meta":
            nn.init.kaiming_uniform_(self.w1, a=5**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grouped = x.reshape(*x.shape[:-1], self.w1.shape[1], -1)  # ..., in_m, in_n
        inner = F.linear(grouped, self.w2).transpose(-1, -2)  # ..., out_k, in_m
        outer = F.linear(inner, self.w1).transpose(-1, -2)  # ..., out_l, out_k
        return self.base(x) + outer.reshape(*x.shape[:-1], -1)


def inject_lokr(model: nn.Module, lokr: LoKr) -> nn.Module:
    """Wrap every target of `lokr` in place; SpecError when its classes hold no Linear layer."""
    targets = lokr.targets(model)
    if not targets:
        raise SpecError(f"LoKr: no Linear layer inside a module of class {', '.join(lokr.factors)}")
    for name, factor in targets.items():
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, child, KroneckerLinear(getattr(owner, child), factor))
    return model
