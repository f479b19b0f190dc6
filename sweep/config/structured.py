"""The sweep's configuration, typed: dataclasses in Hydra's ConfigStore, so Hydra itself rejects an
unknown key or a value of the wrong type. Mode presets come from ckptlib.MODES, families from the
ckptlib registry, quantizations from ckptlib.quantize, a cell's defaults from sweep/config/cell.py:
each fact is defined there once.

Sweep files (conf/sweep/*.yaml) select families and modes by rule through resolvers:
`${families:all}` (every registered family), `${families:buildable}`, `${modes:docs}` (the family
tables' ten), `${modes:synthetic}` (the synthetic sweep's five).
"""

from dataclasses import MISSING as MISSING_FACTORY
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from ckptlib import MODES, CheckpointConfig
from ckptlib.compile import COMPILE_MODES
from ckptlib.modes import SYNTHETIC_MODES
from ckptlib.names import ATTENTION_BACKENDS, TRAINING_MODES
from ckptlib.quantize import NAMES as QUANTIZATION_NAMES
from sweep.machine import gpus

from .cell import DTYPES, RESOLVED, default

# OmegaConf checks an enum field's value by member name: these are the allowed words.
Training = Enum("Training", {mode: mode for mode in TRAINING_MODES})
Rerun = Enum("Rerun", {"none": "none", "failed": "failed", "all": "all"})
Dtype = Enum("Dtype", {name: name for name in ("auto", *DTYPES)})
Attention = Enum("Attention", {name: name for name in ATTENTION_BACKENDS})
Compile = Enum("Compile", {name: name for name in COMPILE_MODES})


@dataclass
class ModeConfig:
    """A checkpointing mode: a CheckpointConfig's schedule under the docs' column name."""

    name: str = MISSING
    backend: str = "none"
    interval: Optional[int] = default("interval")
    stride: Optional[int] = default("stride")
    # what an interval groups: segments | blocks; None: as SimpleTuner wires the family (the docs'
    # columns: ckptlib.modes.as_wired), segments for a builder of one's own
    regions: Optional[str] = None
    blocks: Any = default("blocks")  # the first k blocks (an int) or a list of block indices; None: every block
    offload_attention: bool = default("offload_attention")
    offload_attention_in_regions: bool = default("offload_attention_in_regions")
    # what an FFN-only backend recomputes: modules | side; None: as SimpleTuner wires the family (the
    # docs' -ffn columns), its feed-forward modules for a builder of one's own
    ffn_scope: Optional[str] = None
    # what attention offload wraps (ckptlib.config.ATTENTION_OFFLOAD_SCOPES); None: as SimpleTuner wires the family
    attention_offload_scope: Optional[str] = None


@dataclass
class FamilyConfig:
    """A family: its builder's import path (a ckptlib family, or your own) and its default preset."""

    name: str = MISSING
    _target_: str = MISSING
    default_preset: Optional[str] = None  # None: the builder's (its DEFAULT_PRESET, else its first preset)


@dataclass
class QuantizationConfig:
    name: str = default("quantization")  # ckptlib.quantize: none, int8-torchao, fp8-torchao, int8-sdnq, ...


@dataclass
class MeasureConfig:
    warmup_steps: int = 5  # recorded, excluded from sec/step
    steps: int = 20
    timeout_s: float = 900  # per cell, wall clock
    # after the timed steps, on copies: loss and gradient error against an fp32 math-backend
    # reference of the same weights and inputs (ckptlib.attention.numerics)
    numerics: bool = False
    # after the timed steps: profile_steps more under torch.profiler, summarised, the trace kept in
    # traces/ beside the database (sweep/run/scenarios/profile.py); profiled steps are never timed
    profile: bool = False
    profile_steps: int = 3


@dataclass
class DbConfig:
    # a SQLite file's path (results.db), or postgresql+psycopg://user:password@host/database; from
    # CKPT_SWEEP_DB_URL where that is set, so a password need not be on the command line (none is
    # ever stored: sweep/store/database.py, redacted)
    url: str = "${oc.env:CKPT_SWEEP_DB_URL,sqlite:///results.db}"


@dataclass
class RunConfig:
    # cells of one run name and hardware resume together: a named sweep's name, or for sweep=none
    # the family and training (unrelated models never share a run)
    name: str = "${run_name:${hydra:runtime.choices.sweep},${family.name},${training}}"
    rerun: Rerun = Rerun.none  # none | failed (failed, timeout, crashed) | all; earlier attempts are kept
    # On a CPU, each cell is first predicted and skipped (predicted-oom) when it would need more host
    # memory than the machine has free; true measures it anyway.
    allow_large_cpu: bool = False
    sized_for_gpu: bool = False  # set by the GPU sweeps: a warning with an estimate when they run on a CPU


@dataclass
class SweepConfig:
    """One composed config is one cell."""

    family: FamilyConfig = MISSING
    mode: ModeConfig = MISSING
    quantization: QuantizationConfig = MISSING
    preset: str = "${default_preset:${family._target_},${family.default_preset}}"
    shape: Dict[str, Any] = field(default_factory=dict)  # overrides of the preset's shape: +shape.tokens=2048
    training: Training = Training[default("training")]  # lora | frozen | full
    lora_rank: int = default("lora_rank")
    dtype: Dtype = Dtype[default("dtype")]  # auto (bf16 on GPU, fp32 on CPU) | bf16 | fp16 | fp32
    attention: Attention = Attention[default("attention")]  # the SDPA kernel: auto | math | flash | efficient | cudnn
    # none | regional (each block compiled on its own) | full (the model too); Inductor, compiled cold
    # in each cell, so the first step shows the compile time (ckptlib/compile.py)
    compile: Compile = Compile[default("compile")]
    pin_memory_max_buckets: int = default("pin_memory_max_buckets")
    offload_stash_depth: int = default("offload_stash_depth")  # device-to-host copies in flight (CUDA)
    offload_prefetch: bool = default("offload_prefetch")  # reload the next region while this one recomputes
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    seed: int = default("seed")
    workers: int = 2  # launcher=pod without GPUs: cells run in parallel (with GPUs: one per cell)
    predict: bool = False  # predict each cell's peak instead of running it (provenance `predicted`)
    predict_device: str = "cuda"  # the device model predictions assume: cuda | cpu (ckptlib/predict.py)
    card_gib: Optional[float] = None  # a card size: predicted peaks over it are recorded as oom
    skip_predicted_oom: bool = False  # measuring: skip (predicted-oom) cells predicted not to fit the card
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    db: DbConfig = field(default_factory=DbConfig)
    run: RunConfig = field(default_factory=RunConfig)
    slurm: Any = None  # launcher=slurm's settings, with their defaults: conf/launcher/slurm.yaml
    ray_address: Optional[str] = None  # launcher=ray-cluster: "auto" or ray://head:10001


def enum_fields(schema=SweepConfig, prefix: str = "") -> dict[str, type[Enum]]:
    """The config keys whose value is one of an enum's words ('compile', 'run.rerun', ...)."""
    found = {}
    for f in fields(schema):
        default = f.default_factory() if f.default_factory is not MISSING_FACTORY else f.default
        if isinstance(default, Enum):
            found[prefix + f.name] = type(default)
        elif hasattr(type(default), "__dataclass_fields__"):
            found.update(enum_fields(type(default), f"{prefix}{f.name}."))
    return found


# the config groups of conf/ and the ConfigStore (register): a value is a file or a stored node
GROUPS = ("family", "mode", "quantization", "sweep", "launcher")


def config_dir() -> Path:
    """The Hydra configs: inside the package in a wheel (sweep/conf), else conf/ at the top of the checkout."""
    package = Path(__file__).resolve().parents[1]
    shipped = package / "conf"
    return shipped if shipped.is_dir() else package.parent / "conf"


def group_options(group: str, searchpath: tuple[Path, ...] = ()) -> list[str]:
    """The values `group=` takes: stored configs, conf/'s files and those of the searchpath's folders."""
    stored = {name.removesuffix(".yaml") for name in ConfigStore.instance().repo.get(group, {})}
    folders = (config_dir(), *searchpath)
    return sorted(stored | {path.stem for folder in folders for path in (folder / group).glob("*.yaml")})


def _searchpath(overrides: list[str]) -> tuple[Path, ...] | None:
    """The folders of `hydra.searchpath=[file://...]`; None where an entry is not a folder (pkg://)."""
    folders = []
    for override in overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key == "hydra.searchpath":
            for entry in filter(None, (e.strip().strip("'\"") for e in value.strip("[]").split(","))):
                if not entry.startswith("file://"):
                    return None
                folders.append(Path(entry.removeprefix("file://")))
    return tuple(folders)


def name_problem(overrides: list[str]) -> str | None:
    """One line, with the closest names, for the first override that gives an enum key or a config
    group a word nothing defines (Hydra's own message spans lines). Sweep functions (`choice(...)`)
    are left to Hydra, and so are group values where the searchpath has a package in it; a quoted
    word (`training='frozen'`) is the word."""
    enums, searchpath = enum_fields(), _searchpath(overrides)
    for override in overrides:
        key, equals, value = override.partition("=")
        key = key.lstrip("+~")
        if not equals or "(" in value:
            continue
        if key in enums:
            words = [m.name for m in enums[key]]
        elif key in GROUPS and searchpath is not None:
            words = group_options(key, searchpath)
        else:
            continue
        problem = unknown_word(f"{key}={value}", value, words)
        if problem:
            return problem
    return None


def unknown_word(override: str, value: str, words: list[str]) -> str | None:
    """'key=value: unknown value 'x'; did you mean 'y'? valid: ...' for the first of the
    comma-separated words of `value` that is not in `words`."""
    import difflib

    for word in (w.strip().strip("'\"") for w in value.split(",")):
        if word not in words:
            close = difflib.get_close_matches(word, words, n=2, cutoff=0.6)
            hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
            return f"{override}: unknown value {word!r}; {hint}valid: {', '.join(words)}"
    return None


def mode_config(name: str, config: CheckpointConfig) -> ModeConfig:
    """A mode preset; what its interval groups, its FFN scope and its attention offload's scope are
    left to the family (the fields cell.RESOLVED resolves)."""
    named = (f.name for f in fields(ModeConfig) if f.name not in ("name", *RESOLVED))
    return ModeConfig(name=name, **{field: getattr(config, field) for field in named})


def default_preset(target: str, declared: Optional[str]) -> str:
    """The preset a cell uses when none is given: the family config's own, else its builder's."""
    if declared is not None:
        return declared
    from .builders import BuilderError, builder_default_preset, import_builder

    try:
        return builder_default_preset(import_builder(target)) or "default"
    except BuilderError:
        return "default"  # validation names the builder's problem


def default_run_name(sweep: str, family: str, training) -> str:
    """A named sweep's own name; an ad-hoc one (sweep=none) is named by its family and training."""
    return sweep if sweep != "none" else f"{family}-{getattr(training, 'name', training)}"


def _families(which: str) -> str:
    from ckptlib.families import all_families

    families = all_families()
    chosen = {"all": list(families), "buildable": [n for n, f in families.items() if f.unsupported is None]}
    return ",".join(chosen[which])


def _modes(which: str) -> str:
    return ",".join({"docs": list(MODES), "synthetic": list(SYNTHETIC_MODES)}[which])


def builtin_builder(family: str) -> str | None:
    """The import path of a built-in family's build function (synthetic or a ckptlib family); None
    for any other name."""
    from ckptlib.families import all_families

    if family == "synthetic":
        return "ckptlib.synthetic.build"
    return f"ckptlib.families.builders.{family}" if family in all_families() else None


def register() -> None:
    """Schema, mode presets, quantizations, every family, and the resolvers the configs use."""
    from ckptlib.families import all_families

    store = ConfigStore.instance()
    store.store(name="schema", node=SweepConfig)
    for name, config in MODES.items():
        store.store(group="mode", name=name, node=mode_config(name, config))
    for name in QUANTIZATION_NAMES:
        store.store(group="quantization", name=name, node=QuantizationConfig(name))
    for name in ("synthetic", *all_families()):
        store.store(group="family", name=name, node=FamilyConfig(name, builtin_builder(name)))
    resolvers = {
        "run_name": default_run_name,
        "families": _families,
        "modes": _modes,
        "default_preset": default_preset,
        # what the launcher presets ask of this machine: one GPU per cell, else `workers` CPU cells
        "gpus_per_cell": lambda: 1 if gpus.count() else 0,
        "ray_cpus": lambda workers: None if gpus.count() else int(workers),
    }
    for name, resolver in resolvers.items():
        OmegaConf.register_new_resolver(name, resolver, replace=True)
