"""A cell: one point of the sweep (family x shape x mode x quantization x training), as plain data.

Each field is declared once, here, with everything else there is to know about it (`setting`):
where the typed sweep config holds it, how a report heading names one of its values, whether it
is a column of the cells table, and the schema version of the round that added it. The key,
`cell_from_config`, the reports' settings and the store's columns are derived from these
declarations; the typed config's defaults are tested against them.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ckptlib.config import DEFAULT_OFFLOAD_STASH_DEPTH, DEFAULT_PIN_MEMORY_MAX_BUCKETS, CheckpointConfig
from ckptlib.modes import MODES, OWN_WIRING, WIRINGS, as_wired
from ckptlib.plan import describe_blocks

if TYPE_CHECKING:
    import torch

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # name -> torch's (imported when a cell runs)


def setting(
    default: Any = MISSING,
    *,
    config: str,
    label: str | None = None,
    group: str | None = None,
    column: bool = False,
    since: int | None = None,
    offload_only: bool = False,
    factory=MISSING,
):
    """A cell field. `config`: its dotted key in the typed sweep config; `label`: how a heading
    names a value ('interval {}'), `group` the heading's kind (`checkpoint` settings are compared
    with the mode's preset, `run` settings with their default); `column`: a column of the cells
    table too; `since`: the schema version of the round that added it (None: the first cell key);
    a field added later is left out of the key at its default, so older runs resume;
    `offload_only`: a setting of the offloader, which a heading names only for a mode that offloads."""
    metadata = {
        "config": config,
        "label": label,
        "group": group,
        "column": column,
        "since": since,
        "offload_only": offload_only,
    }
    if factory is not MISSING:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def identity_key(identity: dict[str, Any]) -> str:
    """A short, stable hash of a canonical JSON rendering."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Cell:
    family: str = setting(config="family.name", column=True)
    builder: str = setting(config="family._target_")  # import path of the family's build function
    preset: str = setting(config="preset", column=True)
    mode: str = setting(config="mode.name", column=True)  # the column label (docs' mode name)
    backend: str = setting(config="mode.backend", label="{}", group="checkpoint", column=True)
    interval: int | None = setting(None, config="mode.interval", label="interval {}", group="checkpoint", column=True)
    stride: int | None = setting(None, config="mode.stride", label="stride {}", group="checkpoint", column=True)
    # what the interval groups (ckptlib.config.REGIONS); a mode that does not say takes the family's
    # wiring (`RESOLVED`), so a docs column means what SimpleTuner ran
    regions: str = setting("segments", config="mode.regions", label="interval as {}", group="checkpoint", since=6)
    # which blocks the schedule may checkpoint (CheckpointConfig)
    blocks: int | tuple[int, ...] | None = setting(None, config="mode.blocks", label="{}", group="checkpoint", since=3)
    offload_attention: bool = setting(
        False, config="mode.offload_attention", label="attention offload {}", group="checkpoint", column=True
    )
    # also inside recomputed regions, as SimpleTuner does (the docs' activation-offload columns)
    offload_attention_in_regions: bool = setting(
        False,
        config="mode.offload_attention_in_regions",
        label="attention offload in regions {}",
        group="checkpoint",
        since=6,
    )
    # what an FFN-only backend recomputes (ckptlib.config.FFN_SCOPES); a mode that does not say takes
    # the family's wiring (`RESOLVED`), so a docs -ffn column means what SimpleTuner ran
    ffn_scope: str = setting("modules", config="mode.ffn_scope", label="FFN scope {}", group="checkpoint", since=6)
    # what attention offload wraps (ckptlib.config.ATTENTION_OFFLOAD_SCOPES), resolved like ffn_scope
    attention_offload_scope: str = setting(
        "module",
        config="mode.attention_offload_scope",
        label="attention offload around the {}",
        group="checkpoint",
        since=6,
    )
    quantization: str = setting("none", config="quantization.name", column=True)
    training: str = setting("lora", config="training", label="{}", column=True)
    lora_rank: int = setting(16, config="lora_rank", label="LoRA rank {}", group="run")
    shape: dict[str, Any] = setting(config="shape", factory=dict)  # overrides of the preset's shape
    # auto: bf16 on accelerators, fp32 on CPU
    dtype: str = setting("auto", config="dtype", label="{}", group="run", since=1)
    # the SDPA kernel (ckptlib.names.ATTENTION_BACKENDS)
    attention: str = setting("auto", config="attention", label="{} attention", group="run", since=4)
    # what torch.compile compiles (ckptlib.compile.COMPILE_MODES)
    compile: str = setting("none", config="compile", label="compile {}", group="run", since=5)
    seed: int = setting(0, config="seed", label="seed {}", group="run")
    pin_memory_max_buckets: int = setting(
        DEFAULT_PIN_MEMORY_MAX_BUCKETS,
        config="pin_memory_max_buckets",
        label="{} pinned buckets",
        group="run",
        offload_only=True,
    )
    offload_stash_depth: int = setting(
        DEFAULT_OFFLOAD_STASH_DEPTH,
        config="offload_stash_depth",
        label="{} copies in flight",
        group="run",
        since=3,
        offload_only=True,
    )
    # reloads ahead of use on a side stream (the docs' early offloader reloaded each just in time)
    offload_prefetch: bool = setting(
        True, config="offload_prefetch", label="prefetch {}", group="run", since=5, offload_only=True
    )

    @property
    def key(self) -> str:
        """Identity: a hash of the canonical config (the label `mode` is not part of it). Fields
        added after the first cell key are left out at their defaults, so older runs resume."""
        identity = {k: v for k, v in asdict(self).items() if k != "mode"}
        for name, default in LATER_FIELDS.items():
            if identity[name] == default:
                del identity[name]
        return identity_key(identity)

    def torch_dtype(self) -> torch.dtype | None:
        import torch

        return None if self.dtype == "auto" else getattr(torch, DTYPES[self.dtype])

    def checkpoint_config(self) -> CheckpointConfig:
        """Raises ValueError for a combination that is not a valid config (status `invalid`)."""
        return CheckpointConfig(
            backend=self.backend,
            interval=self.interval,
            stride=self.stride,
            regions=self.regions,
            blocks=self.blocks,
            offload_attention=self.offload_attention,
            offload_attention_in_regions=self.offload_attention_in_regions,
            ffn_scope=self.ffn_scope,
            attention_offload_scope=self.attention_offload_scope,
            pin_memory_max_buckets=self.pin_memory_max_buckets,
            offload_stash_depth=self.offload_stash_depth,
            offload_prefetch=self.offload_prefetch,
        )

    def describe(self) -> str:
        """How progress lines and the sweep's summary name the cell: whatever tells it apart from
        the cells beside it (a compile mode, an attention backend, a LoRA rank) included."""
        shape = "".join(f" {k}={v}" for k, v in sorted(self.shape.items()))
        values = asdict(self)
        named = ", ".join(setting_label(s, values[s]) for s in differing(values, self.mode))
        mode = f"{self.mode} ({named})" if named else self.mode
        return f"{self.family}/{self.preset}{shape} {mode} q={self.quantization} {self.training}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


FIELDS = {f.name: f for f in fields(Cell)}


def default(name: str) -> Any:
    """A cell field's default (MISSING for the fields every cell must give)."""
    declared = FIELDS[name]
    return declared.default_factory() if declared.default_factory is not MISSING else declared.default


LATER_FIELDS = {name: default(name) for name, f in FIELDS.items() if f.metadata["since"] is not None}
COLUMNS = tuple(name for name, f in FIELDS.items() if f.metadata["column"])  # also columns of the cells table
# How headings name a setting's value, by group: checkpoint settings (compared with the mode's
# preset) and run settings (compared with their default).
LABELS = {
    group: {name: f.metadata["label"] for name, f in FIELDS.items() if f.metadata["group"] == group}
    for group in ("checkpoint", "run")
}


def _value(name: str, value):
    """A typed config's value as the cell holds it: an enum member's word, a list of blocks as a tuple."""
    value = getattr(value, "name", value)
    return tuple(value) if name == "blocks" and isinstance(value, list) else value


def cell_from_config(cfg) -> Cell:
    """The cell a composed (typed) sweep config describes."""
    from omegaconf import OmegaConf

    def select(path: str):
        value = OmegaConf.select(cfg, path)
        return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value

    values = {name: _value(name, select(f.metadata["config"])) for name, f in FIELDS.items()}
    for name, resolve in RESOLVED.items():
        if values[name] is None:
            values[name] = resolve(values)
    return Cell(**values)


def _wired(values: dict[str, Any]) -> CheckpointConfig | None:
    """A cell's mode as SimpleTuner's model of its family wires it (ckptlib.modes.WIRINGS; a model of
    one's own: the defaults); None for an invalid mode, recorded as such whatever it wires."""
    try:
        offload = bool(values.get("offload_attention"))
        config = CheckpointConfig(values["backend"], interval=values.get("interval"), offload_attention=offload)
    except ValueError:
        return None
    return as_wired(config, WIRINGS.get(values.get("family"), OWN_WIRING))


def _wired_value(name: str, values: dict[str, Any]) -> Any:
    """A cell's field `name` when its mode does not say: as the family's wiring sets it."""
    config = _wired(values)
    return default(name) if config is None else getattr(config, name)


# Fields a typed config may leave None, resolved from the cell's other values: what an interval groups,
# what an FFN-only backend recomputes, what attention offload wraps.
RESOLVED = {name: functools.partial(_wired_value, name) for name in ("regions", "ffn_scope", "attention_offload_scope")}


def _offloads(values: dict[str, Any], preset: CheckpointConfig | None) -> bool:
    """Whether a cell's schedule offloads: from its recorded backend and attention offload, else
    from its mode's preset (a published cell records neither); True where neither says."""
    if values.get("backend") is not None:
        try:
            attention = bool(values.get("offload_attention"))
            return CheckpointConfig(values["backend"], offload_attention=attention).uses_offload
        except ValueError:
            return True
    return preset.uses_offload if preset is not None else True


def differing(values: dict[str, Any], mode: str) -> list[str]:
    """The settings a label must name for one cell (`values` as recorded; None: not recorded, as
    in published cells): checkpointing settings other than its mode's preset's, run settings other
    than their defaults (the offloader's only where the schedule offloads: `prefetch False` says
    nothing of a cell without offload)."""
    preset = MODES.get(mode)
    expected = preset and {s: getattr(preset, s) for s in LABELS["checkpoint"]}
    if expected:  # as the family wires the schedule the cell ran (a published cell records none: its mode's)
        wired = {"interval": preset.interval, "backend": preset.backend, "offload_attention": preset.offload_attention}
        wired.update({name: value for name, value in values.items() if value is not None})
        expected.update({name: resolve(wired) for name, resolve in RESOLVED.items()})
    named = [
        s
        for s in LABELS["checkpoint"]
        if preset is not None and values.get(s) is not None and _comparable(s, values[s]) != _comparable(s, expected[s])
    ]
    offloads = _offloads(values, preset)
    return named + [
        s
        for s in LABELS["run"]
        if values.get(s) not in (None, default(s)) and (offloads or not FIELDS[s].metadata["offload_only"])
    ]


def _comparable(name: str, value):
    """Blocks as words (a recorded list, a tuple, an int, or words already); anything else as it is."""
    if name != "blocks" or value is None or isinstance(value, str):
        return value
    return describe_blocks(tuple(value) if isinstance(value, list) else value)


# Setting -> its values that a label says in other words than their own
LABEL_WORDS = {"regions": {"each": "every block"}}


def setting_label(name: str, value: Any) -> str:
    """'interval 3', 'compile regional', 'LoRA rank 64', 'first 12 blocks': a setting's value as labels say it."""
    words = LABEL_WORDS.get(name, {})
    return FIELDS[name].metadata["label"].format(words.get(value, value) if words else _comparable(name, value))
