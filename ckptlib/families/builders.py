"""Import paths for sweep configs: `_target_: ckptlib.families.builders.<family>`."""

from __future__ import annotations

from .registry import FamilyBuilder, get


def __getattr__(name: str) -> FamilyBuilder:
    try:
        get(name)
    except ValueError as error:
        raise AttributeError(str(error)) from None
    return FamilyBuilder(name)
