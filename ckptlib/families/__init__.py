"""Real diffusers architectures, built from published configs with random weights.

    work = ckptlib.families.build("flux1", preset="tiny", training="lora")

Entries live by lineage (flux.py, image.py, video.py, unet.py, audio.py, unavailable.py); a new
family is one `Family(...)` in its lineage's FAMILIES.
"""

from .family import Family, Preset
from .geometry import FamilyShape, Latents
from .registry import FAMILIES, all_families, build, describe_shape, get, resolve_shape

__all__ = [
    "FAMILIES",
    "Family",
    "FamilyShape",
    "Latents",
    "Preset",
    "all_families",
    "build",
    "describe_shape",
    "get",
    "resolve_shape",
]
