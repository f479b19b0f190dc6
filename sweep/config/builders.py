"""What the harness asks of a family's builder (`family._target_`), checked before any cell runs.

A builder is a callable `build(preset, training, device, lora_rank, seed, dtype, quantization,
**shape) -> ckptlib.Workload`. It may declare its presets (a `presets` attribute, or a module-level
`PRESETS`; the first is the default unless it names a `DEFAULT_PRESET`) and describe a shape
(`describe_shape(preset, **shape) -> {tokens, text_tokens, height, width, frames, batch}`, or
`resolve_shape(preset, **shape)` returning an object with `tokens`). `ckpt-sweep new-family NAME`
writes a complete example.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

BUILD_KEYWORDS = ("preset", "training", "device", "lora_rank", "seed", "dtype", "quantization")


class BuilderError(ValueError):
    """A builder cannot be used; the message names it and what is wrong."""


def import_builder(target: str):
    """A family's build function from its import path. The current directory is importable, as
    for `python -m`: a builder next to the command line is found."""
    module_name, _, name = target.rpartition(".")
    if not module_name:
        raise BuilderError(f"builder {target!r} is not an import path (module.function)")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - the module's own error, whatever it is, is the message
        raise BuilderError(f"cannot import builder {target!r} ({type(error).__name__}: {error})") from None
    try:
        builder = getattr(module, name)
    except AttributeError as error:
        raise BuilderError(f"cannot import builder {target!r} ({error})") from None
    if not callable(builder):
        raise BuilderError(f"builder {target!r} is a {type(builder).__name__}, not a function")
    return builder


def _declared(builder, name: str):
    """An attribute of the builder, or of its module."""
    if hasattr(builder, name):
        return getattr(builder, name)
    return getattr(importlib.import_module(builder.__module__), name, None)


def builder_presets(builder) -> list[str] | None:
    """Presets a builder declares; None when it declares none (any preset name is passed through)."""
    presets = _declared(builder, "presets") if hasattr(builder, "presets") else _declared(builder, "PRESETS")
    return None if presets is None else list(presets)


def builder_default_preset(builder) -> str | None:
    """The builder's default preset: its `default_preset` / module's DEFAULT_PRESET, else its first preset."""
    declared = getattr(builder, "default_preset", None) or _declared(builder, "DEFAULT_PRESET")
    if declared:
        return declared
    presets = builder_presets(builder)
    return presets[0] if presets else None


def signature_problems(target: str, builder) -> list[str]:
    """Keywords the harness passes that the builder cannot take."""
    try:
        parameters = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    missing = [k for k in BUILD_KEYWORDS if k not in parameters]
    if not missing:
        return []
    return [
        f"builder {target!r} does not take {', '.join(missing)}; a builder is called as "
        f"build({', '.join(f'{k}=...' for k in BUILD_KEYWORDS)}, **shape) (add **kwargs to ignore some)"
    ]


def returned_type_problem(builder, preset: str, shape: dict) -> str | None:
    """Build once on the meta device (nothing is allocated): a builder that returns something other
    than a ckptlib.Workload is named before any cell runs. A builder that cannot build on meta is
    not judged here (its first cell will say)."""
    from ckptlib import Workload

    try:
        work = builder(
            preset=preset, training="lora", device="meta", lora_rank=4, seed=0, dtype=None, quantization="none", **shape
        )
    except Exception:  # noqa: BLE001 - not buildable on meta: nothing to conclude
        return None
    return None if isinstance(work, Workload) else wrong_type(work)


def wrong_type(work) -> str:
    return f"build() returned {type(work).__name__}, expected ckptlib.Workload"


# What a builder's describe_shape tells of a cell's shape (each a column of the results database).
SHAPE_COLUMNS = ("tokens", "text_tokens", "height", "width", "frames", "batch", "samples_per_step", "sample_unit")


def describe_shape(builder, preset: str, shape: dict) -> dict:
    """The shape facts of a cell (None where the builder does not say); never raises."""
    try:
        describe = _declared(builder, "describe_shape")
        if describe is not None:
            facts = describe(preset, **shape)
        else:
            resolve = _declared(builder, "resolve_shape")
            facts = {"tokens": getattr(resolve(preset, **shape), "tokens", None)} if resolve else {}
    except Exception:  # noqa: BLE001 - a label, never a reason to lose a cell
        facts = {}
    if facts.get("samples_per_step") is None and facts.get("batch") is not None:  # a builder of one's own
        facts = {**facts, "samples_per_step": facts["batch"], "sample_unit": facts.get("sample_unit") or "samples"}
    return {k: facts.get(k) for k in SHAPE_COLUMNS}
