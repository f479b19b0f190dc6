"""What the harness asks of a family's builder (`family._target_`), checked before any cell runs.

A builder is a callable `build(preset, training, device, lora_rank, seed, dtype, quantization,
**shape) -> ckptlib.Workload`. It may declare its presets (a `presets` attribute, or a module-level
`PRESETS`; the first is the default unless it names a `DEFAULT_PRESET`) and describe a shape
(`describe_shape(preset, **shape) -> {tokens, text_tokens, height, width, frames, batch}`, or
`resolve_shape(preset, **shape)` returning an object with `tokens`). `ckpt-sweep new-family NAME`
writes a complete example.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import inspect
import json
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


# NOTE [ Fingerprint schemes ]: a fingerprint is now taken of the model built without its LoRA
# adapters and on an unquantized base (NOTE [ Building to inspect ] in ckptlib/workload.py; the
# source it hashes names the targets, the cell's key the rank and the quantization), so neither PEFT
# nor torchao is imported to take it, and says so by its prefix. Cells recorded before hold a bare
# digest of the model as its cell built it: such a cell is compared by that scheme, so an upgrade
# measures nothing again by itself.
FINGERPRINT_PREFIX = "m2-"
PROJECT_BUILDERS = ("ckptlib.", "sweep.")  # import paths of the builders this project ships


def is_own_builder(target: str) -> bool:
    """A builder of the user's own (not one this project ships, whose code the recorded commit names)."""
    return not target.startswith(PROJECT_BUILDERS)


def is_legacy_fingerprint(value: str) -> bool:
    return not value.startswith(FINGERPRINT_PREFIX)


@functools.cache
def fingerprint(
    target: str, preset: str, shape_json: str, training: str, lora_rank: int, quantization: str, legacy: bool = False
) -> str | None:
    """What a builder of one's own builds, as a short hash: its module's source on disk, and, built on
    meta, every parameter's name, shape and dtype and the block spec. A cell recorded under another
    fingerprint was measured on another model (sweep/run/app.py measures it again). None for the
    project's own builders, whose code the recorded commit names. `legacy`: by the earlier scheme."""
    if not is_own_builder(target):
        return None
    from ckptlib import adapters_not_injected

    builder = import_builder(target)
    module = sys.modules.get(builder.__module__)
    source = Path(module.__file__).read_bytes() if module is not None and getattr(module, "__file__", None) else b""
    digest = hashlib.sha256(source)
    try:
        with contextlib.nullcontext() if legacy else adapters_not_injected():
            work = builder(
                preset=preset, training=training, device="meta", lora_rank=lora_rank, seed=0, dtype=None,
                quantization=quantization if legacy else "none", **json.loads(shape_json),
            )  # fmt: skip
        digest.update(repr([(n, tuple(p.shape), str(p.dtype)) for n, p in work.model.named_parameters()]).encode())
        digest.update(repr(work.spec).encode())
        if work.spec.cross_attention:  # not in the repr: earlier fingerprints stay as they were
            digest.update(repr(tuple(work.spec.cross_attention)).encode())
    except Exception:  # noqa: BLE001 - not buildable on meta: the source alone tells
        pass
    return digest.hexdigest()[:12] if legacy else FINGERPRINT_PREFIX + digest.hexdigest()[:12]


def built_problems(target: str, preset: str, shape: dict) -> list[str]:
    """Build once on the meta device (nothing is allocated), before any cell runs: a builder that
    returns something other than a ckptlib.Workload, a spec whose block lists, attention or
    feed-forward names name nothing in the model, LoRA targets that match no layer. A builder that
    cannot build on meta for another reason is not judged here (its first cell will say)."""
    from ckptlib import SpecError, Workload, adapters_not_injected, spec_problems

    builder = import_builder(target)
    try:
        with adapters_not_injected():
            work = builder(
                preset=preset, training="lora", device="meta", lora_rank=4, seed=0, dtype=None, quantization="none",
                **shape,
            )  # fmt: skip
    except SpecError as error:  # a LoRA target that names nothing
        return [str(error)]
    except Exception:  # noqa: BLE001 - not buildable on meta: nothing to conclude
        return []
    if not isinstance(work, Workload):
        return [wrong_type(work)]
    return spec_problems(work.model, work.spec)


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
