"""One docs family as data: its diffusers class, presets, input maker, block lists, attention and
feed-forward submodules, LoRA targets and what it cannot offer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..modes import OWN_WIRING, WIRINGS, Wiring
from ..spec import BlockSpec, CallConvention, FeedForwardSide, UnsupportedModeError
from .geometry import FamilyShape, Latents

if TYPE_CHECKING:
    import torch
    from torch import nn

DEFAULT_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")


@dataclass(frozen=True)
class Preset:
    config: Mapping[str, Any]  # constructor overrides on top of the class defaults
    shape: FamilyShape  # the docs' training shape (real presets) or a tiny one
    params_b: float | None = None  # published size in billions (checked on meta)


InputMaker = Callable[[Any, FamilyShape, "torch.device", "torch.dtype", "torch.Generator"], dict]


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
    # what a training sample is, for throughput (samples/s): None for images, or frames where the
    # shape has frames (video); audio families count clips
    sample_unit: str | None = None
    # The model config's count of routed experts, for a mixture of experts that routes tokens by a
    # boolean mask per expert: a prediction keeps 1 / that many tokens per expert (balanced routing;
    # BlockSpec.mask_share).
    routed_experts: str | None = None
    # Inputs whose values the model reads in Python (`mask.sum(1).tolist()`): the meta device has
    # no values, so a build on it makes these on the CPU (Workload.host_inputs).
    host_inputs: tuple[str, ...] = ()
    # Whether the model makes masks of those inputs' values that then meet its activations outside an
    # index (`where(mask, ...)`): a prediction moves them onto meta there (Workload.host_masks).
    host_masks: bool = False
    # Block class name -> its feed-forward side as SimpleTuner's copy of the block checkpoints it for
    # the FFN-only backends (ckptlib/families/ffn_sides.py), where ckptlib.modes.WIRINGS gives the
    # family the "side" scope.
    ffn_sides: Mapping[str, FeedForwardSide] = field(default_factory=dict)
    # Attention submodules between a block's streams, offloaded where the family's wiring says
    # "module-and-cross" (BlockSpec.cross_attention).
    cross_attention: tuple[str, ...] = ()

    @property
    def wiring(self) -> Wiring:
        """What the docs' modes mean for this family (ckptlib.modes.WIRINGS, as_wired)."""
        return WIRINGS.get(self.name, OWN_WIRING)

    def spec(self, model: nn.Module) -> BlockSpec:
        lists = self.block_lists(model) if callable(self.block_lists) else self.block_lists
        return BlockSpec(
            block_lists=list(lists),
            attention=self.attention,
            feed_forward=self.feed_forward,
            conventions=dict(lists),
            name=self.docs_name,
            reasons=self.reasons,
            mask_share=1 / model.config[self.routed_experts] if self.routed_experts else None,
            ffn_sides=self.ffn_sides,
            cross_attention=self.cross_attention,
        )

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
        return self.latents.tokens(self.config(preset), shape)

    def build_meta(self, preset: str, buffers_on_meta: bool = False) -> nn.Module:
        """The preset's model with meta parameters (materialize gives them a device); its buffers
        real, or meta too (`buffers_on_meta`: a model that stays on meta)."""
        from .materialize import build_on_meta

        cls = self.model_class()
        if self.setup is not None:
            self.setup()
        return build_on_meta(cls, self.config(preset), buffers_on_meta)
