"""The family registry: one declarative entry per docs family (see entries.py)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from ..apply import BlockSpec, CallConvention, UnsupportedModeError
from ..workload import (
    Workload,
    adamw_for,
    default_dtype,
    make_trainable,
    seeded_generator,
)
from .geometry import FamilyShape, Latents, constructor_config
from .materialize import build_on_meta, materialize

DEFAULT_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")


@dataclass(frozen=True)
class Preset:
    config: Mapping[str, Any]  # constructor overrides on top of the class defaults
    shape: FamilyShape  # the docs' training shape (real presets) or a tiny one
    params_b: float | None = None  # published size in billions (checked on meta)


InputMaker = Callable[[Any, FamilyShape, torch.device, torch.dtype, torch.Generator], dict]


@dataclass(frozen=True)
class Family:
    name: str  # registry key: family=<name> in sweeps
    docs_name: str
    cls: str | None  # diffusers class; None: the installed diffusers has none
    presets: Mapping[str, Preset] = field(default_factory=dict)
    inputs: InputMaker | None = None
    # block list path -> call convention (None: per-block regions only); or a function of the
    # built model, for architectures whose lists depend on the config (UNets)
    block_lists: Mapping[str, CallConvention | None] | Callable[[nn.Module], Mapping] = field(default_factory=dict)
    attention: tuple[str, ...] = ()
    feed_forward: tuple[str, ...] = ()
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    latents_arg: str = "hidden_states"  # the noisy latents among the forward's arguments
    latents: Latents | None = None  # how the input becomes the transformer's tokens (None: not a token model)
    setup: Callable[[], None] | None = None  # run once before building (shims for optional imports)
    blocks_note: str = ""  # what a "block" is for this family, where it is not a transformer block
    reasons: Mapping[str, str] = field(default_factory=dict)  # "attention" / "feed_forward" -> why not offered
    # block arguments computed in fp32 whatever the weights' dtype, besides rotary tables (which
    # diffusers computes in fp32 everywhere): embeddings of modules the class keeps in fp32
    fp32_inputs: tuple[str, ...] = ()
    unsupported: str | None = None  # why the family cannot be built at all

    def spec(self, model: nn.Module) -> BlockSpec:
        lists = self.block_lists(model) if callable(self.block_lists) else self.block_lists
        return BlockSpec(block_lists=list(lists), attention=self.attention, feed_forward=self.feed_forward,
                         conventions=dict(lists), name=self.docs_name, reasons=self.reasons)

    def model_class(self):
        if self.unsupported:
            raise UnsupportedModeError(f"{self.docs_name}: {self.unsupported}")
        import diffusers

        cls = getattr(diffusers, self.cls, None)
        if cls is None:
            raise UnsupportedModeError(f"{self.docs_name}: diffusers {diffusers.__version__} has no {self.cls}")
        return cls

    @property
    def default_preset(self) -> str:
        """The first real-size preset: the docs' model at the docs' training shape."""
        return next((name for name in self.presets if name != "tiny"), "tiny")

    def preset(self, name: str) -> Preset:
        if self.unsupported:
            raise UnsupportedModeError(f"{self.docs_name}: {self.unsupported}")
        if name not in self.presets:
            raise ValueError(f"{self.name}: unknown preset {name!r}; valid presets: {', '.join(self.presets)}")
        return self.presets[name]

    def config(self, preset: str) -> dict:
        return dict(self.preset(preset).config)

    def image_tokens(self, preset: str, shape: FamilyShape) -> int | None:
        """The latent tokens the transformer sees for this input (after the VAE and patching)."""
        if self.latents is None:
            return None
        return self.latents.tokens(constructor_config(self.model_class(), self.config(preset)), shape)

    def build_meta(self, preset: str) -> nn.Module:
        cls = self.model_class()
        if self.setup is not None:
            self.setup()
        return build_on_meta(cls, self.config(preset))


FAMILIES: dict[str, Family] = {}


def all_families() -> dict[str, Family]:
    from . import entries  # noqa: F401 - fills the registry

    return dict(FAMILIES)


def register(*families: Family) -> None:
    for family in families:
        if "." in family.name:  # the name is the last part of an import path (ckptlib.families.builders.<name>)
            raise ValueError(f"family name {family.name!r} must not contain '.'")
        if family.name in FAMILIES:
            raise ValueError(f"family {family.name!r} registered twice")
        FAMILIES[family.name] = family


def get(name: str) -> Family:
    from . import entries  # noqa: F401 - fills the registry

    if name not in FAMILIES:
        raise ValueError(f"unknown family {name!r}; known families: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]


def resolve_shape(family: str, preset: str, **overrides) -> FamilyShape:
    shape = get(family).preset(preset).shape
    return replace(shape, **{k: v for k, v in overrides.items() if v is not None})


def describe_shape(family: str, preset: str, **overrides) -> dict:
    """What a cell's shape means: image tokens and text tokens as the transformer sees them, the
    resolution, frames and batch."""
    shape = resolve_shape(family, preset, **overrides)
    return {"tokens": get(family).image_tokens(preset, shape), "text_tokens": shape.text_tokens, "height": shape.height,
            "width": shape.width, "frames": shape.frames, "batch": shape.batch}


def build(family: str, preset: str = "tiny", training: str = "lora", device: str = "cpu", lora_rank: int = 16,
          seed: int = 0, dtype: torch.dtype | None = None, quantization: str = "none", **shape_overrides) -> Workload:
    """A family's training step: random weights (the base optionally quantized), the family's
    inputs, flow-matching-style MSE."""
    entry = get(family)
    shape = resolve_shape(family, preset, **shape_overrides)
    dtype = dtype or default_dtype(device)
    device = torch.device(device)
    model = materialize(entry.build_meta(preset), device, dtype, seed)
    model = make_trainable(model, training, list(entry.lora_targets), lora_rank, quantization)
    model.train()
    generator = seeded_generator(device, seed + 1)
    kwargs = entry.inputs(model.config, shape, device, dtype, generator)
    kwargs["return_dict"] = False
    grad_inputs = ()
    if training == "frozen":  # gradients flow to the latents only
        latents = kwargs[entry.latents_arg]
        grad_inputs = tuple(latents) if isinstance(latents, list) else (latents,)
        for t in grad_inputs:
            t.requires_grad_(True)
    return Workload(model=model, spec=entry.spec(model), kwargs=kwargs, target=None, optimizer=adamw_for(model),
                    grad_inputs=grad_inputs)


class FamilyBuilder:
    """What a sweep's family config points at (`_target_: ckptlib.families.builders.flux1`):
    a build function with the family's presets and shapes attached for validation and labels."""

    def __init__(self, name: str):
        self.name = name

    @property
    def presets(self) -> list[str] | None:
        """None for a family without a class: any preset runs, and records why it is unsupported."""
        family = get(self.name)
        return None if family.unsupported else list(family.presets)

    def resolve_shape(self, preset: str, **overrides) -> FamilyShape:
        return resolve_shape(self.name, preset, **overrides)

    def describe_shape(self, preset: str, **overrides) -> dict:
        return describe_shape(self.name, preset, **overrides)

    def __call__(self, preset: str = "tiny", **kwargs) -> Workload:
        return build(self.name, preset, **kwargs)
