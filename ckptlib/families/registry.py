"""The family registry: every lineage module's entries, in one explicit list, and what builds them."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from . import audio, flux, image, unavailable, unet, video
from .family import Family
from .geometry import FamilyShape

if TYPE_CHECKING:
    import torch

    from ..adapters import LoKr
    from ..workload import Workload

# The registration list: lineage by lineage, in this order everywhere (sweeps, reports).
LINEAGES = (flux, image, video, unet, audio, unavailable)


def _registry() -> dict[str, Family]:
    families: dict[str, Family] = {}
    for family in (f for lineage in LINEAGES for f in lineage.FAMILIES):
        if "." in family.name:  # the name is the last part of an import path (ckptlib.families.builders.<name>)
            raise ValueError(f"family name {family.name!r} must not contain '.'")
        if family.name in families:
            raise ValueError(f"family {family.name!r} registered twice")
        families[family.name] = family
    return families


FAMILIES: dict[str, Family] = _registry()


def all_families() -> dict[str, Family]:
    return dict(FAMILIES)


def get(name: str) -> Family:
    if name not in FAMILIES:
        raise ValueError(f"unknown family {name!r}; known families: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]


def resolve_shape(family: str, preset: str, **overrides) -> FamilyShape:
    shape = get(family).preset(preset).shape
    return replace(shape, **{k: v for k, v in overrides.items() if v is not None})


def describe_shape(family: str, preset: str, **overrides) -> dict:
    """What a cell's shape means: image tokens and text tokens as the transformer sees them, the
    resolution, frames and batch, and the samples a step trains on (images, video frames, clips)."""
    shape = resolve_shape(family, preset, **overrides)
    unit = get(family).sample_unit or ("frames" if shape.frames else "images")
    return {
        "samples_per_step": shape.batch * (shape.frames if unit == "frames" else 1),
        "sample_unit": unit,
        "tokens": get(family).image_tokens(preset, shape),
        "text_tokens": shape.text_tokens,
        "height": shape.height,
        "width": shape.width,
        "frames": shape.frames,
        "batch": shape.batch,
    }


def build(
    family: str,
    preset: str = "tiny",
    training: str = "lora",
    device: str = "cpu",
    lora_rank: int = 16,
    seed: int = 0,
    dtype: torch.dtype | None = None,
    quantization: str = "none",
    lora_dropout: float = 0.0,
    lokr: LoKr | None = None,
    **shape_overrides,
) -> Workload:
    """A family's training step: random weights (the base optionally quantized), the family's
    inputs, flow-matching-style MSE. `lora_dropout`: PEFT's dropout before each adapter (SimpleTuner
    trains with 0.1), which saves a mask and a dropped input per adapted layer. `lokr`: LyCORIS LoKr
    adapters instead of LoRA, as SimpleTuner's LoKr examples train them (ckptlib.adapters.LoKr)."""
    import torch

    from ..workload import Workload, adamw_for, default_dtype, make_trainable, seeded_generator
    from .materialize import materialize

    entry = get(family)
    shape = resolve_shape(family, preset, **shape_overrides)
    dtype = dtype or default_dtype(device)
    device = torch.device(device)
    model = materialize(entry.build_meta(preset, buffers_on_meta=device.type == "meta"), device, dtype, seed)
    model = make_trainable(model, training, list(entry.lora_targets), lora_rank, quantization, lora_dropout, lokr)
    model.train()
    generator = seeded_generator(device, seed + 1)
    kwargs = entry.inputs(model.config, shape, device, dtype, generator)
    if entry.host_inputs and device.type == "meta":  # NOTE [ Inputs read in Python ]
        on_host = entry.inputs(model.config, shape, torch.device("cpu"), dtype, seeded_generator("cpu", seed + 1))
        kwargs.update({name: on_host[name] for name in entry.host_inputs})
    kwargs["return_dict"] = False
    grad_inputs = ()
    if training == "frozen":  # gradients flow to the latents only
        latents = kwargs[entry.latents_arg]
        grad_inputs = tuple(latents) if isinstance(latents, list) else (latents,)
        for t in grad_inputs:
            t.requires_grad_(True)
    return Workload(
        model=model,
        spec=entry.spec(model),
        kwargs=kwargs,
        target=None,
        optimizer=adamw_for(model),
        grad_inputs=grad_inputs,
        host_inputs=entry.host_inputs,
        host_masks=entry.host_masks,
    )


class FamilyBuilder:
    """What a sweep's family config points at (`_target_: ckptlib.families.builders.flux1`):
    a build function with the family's presets and shapes attached for validation and labels."""

    def __init__(self, name: str):
        self.name = name

    @property
    def default_preset(self) -> str:
        family = get(self.name)
        return "tiny" if family.unsupported else family.default_preset

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
