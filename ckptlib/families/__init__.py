"""Real diffusers architectures, built from published configs with random weights.

    work = ckptlib.families.build("flux1", preset="tiny", training="lora")
"""
from .registry import FAMILIES, Family, FamilyShape, all_families, build, get

__all__ = ["FAMILIES", "Family", "FamilyShape", "all_families", "build", "get"]
