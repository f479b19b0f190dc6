"""Everything that would make cells fail for a reason of the sweep's own making, named before any
cell runs: one line per problem, nothing written."""

from __future__ import annotations

import functools
import itertools
import os
import re
from dataclasses import fields

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from ckptlib.quantize import NAMES as QUANTIZATION_NAMES
from sweep.config.builders import (
    BuilderError,
    builder_presets,
    built_problems,
    import_builder,
    is_own_builder,
    signature_problems,
)
from sweep.config.cell import cell_from_config
from sweep.machine import environment, gpus
from sweep.store import database as store

from .isolation import answered_with_torch

DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
# The config keys `validate` reads: jobs that differ only in other keys need no separate check.
VALIDATED_KEYS = (
    "family",
    "preset",
    "training",
    "db",
    "run",
    "sweep",
    "predict",
    "predict_device",
    "card_gib",
    "skip_predicted_oom",
    "device",
    "dtype",
    "quantization",
    "launcher",
    "slurm",
    "ray_address",
    "measure",
)


class SweepConfigError(ValueError):
    """The sweep cannot start; nothing was run or written."""


def job_overrides(overrides: list) -> list[list[str]]:
    """The cartesian product of parsed overrides, one override list per job: what Hydra's basic
    sweeper runs (a later override of a key replaces an earlier one)."""
    choices: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        values = (
            list(override.sweep_string_iterator())
            if override.is_sweep_override()
            else [override.get_value_element_as_str()]
        )
        choices[key] = [f"{key}={value}" for value in values]
    return [list(job) for job in itertools.product(*choices.values())]


def expand_jobs(config: DictConfig) -> tuple[int, list[DictConfig]] | None:
    """The number of jobs a basic-sweeper multirun will run, and one composed config for every
    distinct combination of the validated keys: the first job with it (composing each of hundreds
    of jobs takes seconds, and the sweeper composes them all; these it is handed)."""
    if "BasicSweeper" not in str(config.hydra.sweeper.get("_target_", "")):
        return None
    loader = GlobalHydra.instance().config_loader()
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(params + list(config.hydra.overrides.task))
    jobs = job_overrides(parsed)  # as the sweeper will compose them: the loader keeps these for it
    checked: dict[tuple[str, ...], list[str]] = {}
    for job in jobs:
        checked.setdefault(tuple(o for o in job if _config_key(o) in VALIDATED_KEYS), job)
    return len(jobs), [loader.compose_ahead(config, job) for job in checked.values()]  # sweep/run/compose_once.py


def _config_key(override: str) -> str:
    """The top-level config key an override string sets: `+shape.tokens=16` -> shape."""
    return override.split("=")[0].lstrip("+~").split(".")[0]


def override_problems(config: DictConfig) -> list[str]:
    """Overrides Hydra lets through but no cell can use: `+mode.<key>` for a key ModeConfig lacks
    (`+` may add keys to a typed config)."""
    from sweep.config.structured import ModeConfig

    loader = GlobalHydra.instance().config_loader()
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(list(config.hydra.overrides.task))
    known = [f.name for f in fields(ModeConfig)]
    return [
        f"{o.get_key_element()}: not a mode setting; a mode has {', '.join(known)}"
        for o in parsed
        if o.get_key_element().lstrip("+~").startswith("mode.")
        and o.get_key_element().lstrip("+~").removeprefix("mode.") not in known
    ]


def job_value(job: DictConfig, key: str):
    """A key of a composed job config whose value interpolates `${hydra:...}` (run.name)."""
    from hydra.core.hydra_config import HydraConfig

    hydra_config = HydraConfig.instance()
    previous, readonly = hydra_config.cfg, OmegaConf.is_readonly(job.hydra)
    hydra_config.set_config(job)  # which makes job.hydra read-only: the launcher is handed this job later
    try:
        return OmegaConf.select(job, key)
    finally:
        hydra_config.cfg = previous
        OmegaConf.set_readonly(job.hydra, readonly)


def measure_problems(job: DictConfig) -> list[str]:
    """Ranges (the typed config already holds whole numbers and numbers)."""
    measure, problems = job.measure, []
    if measure.steps < 1:
        problems.append(f"measure.steps must be at least 1 (a measured step), got {measure.steps}")
    if measure.warmup_steps < 0:
        problems.append(f"measure.warmup_steps must be 0 or more, got {measure.warmup_steps}")
    if measure.profile and measure.profile_steps < 1:
        problems.append(f"measure.profile_steps must be at least 1 to profile, got {measure.profile_steps}")
    if measure.timeout_s <= 0:
        problems.append(f"measure.timeout_s must be a positive number of seconds, got {measure.timeout_s:g}")
    return problems


def builder_problems(job: DictConfig) -> list[str]:
    target = str(job.family.get("_target_"))
    try:
        builder = import_builder(target)
    except BuilderError as error:
        return [f"family {job.family.name}: {error}"]
    problems = [f"family {job.family.name}: {p}" for p in signature_problems(target, builder)]
    presets = builder_presets(builder)
    if presets is not None and str(job.preset) not in presets:
        problems.append(f"family {job.family.name}: unknown preset {job.preset!r}; valid presets: {', '.join(presets)}")
    elif not problems and is_own_builder(target):  # your own builder: does it return a Workload?
        check = functools.partial(built_problems, target, str(job.preset), OmegaConf.to_container(job.shape))
        cell = cell_from_config(job)  # how the job trains, as its cell holds it
        built = answered_with_torch(check, target, cell.training, runs_cells=launcher(job) is None)
        problems += [f"family {job.family.name}: {problem}" for problem in built or []]
    return problems


def launcher(job: DictConfig):
    """The job's launcher class, or None for Hydra's basic one. A launcher of this project answers
    for itself (hydra_plugins/ckpt_sweep): `config_problems(job)` before anything runs, and
    `runs_elsewhere(job)`, whether cells run on other machines (whose devices this one cannot see)."""
    from hydra.utils import get_class

    target = str(OmegaConf.select(job, "hydra.launcher._target_") or "")
    return get_class(target) if target.startswith("hydra_plugins.ckpt_sweep.") else None


def runs_elsewhere(job: DictConfig) -> bool:
    chosen = launcher(job)
    return chosen is not None and chosen.runs_elsewhere(job)


def launcher_problems(job: DictConfig) -> list[str]:
    chosen = launcher(job)
    return [] if chosen is None else chosen.config_problems(job)


def prediction_problems(job: DictConfig) -> list[str]:
    from ckptlib.devices import DEVICE_MODELS

    problems = []
    if job.predict_device not in DEVICE_MODELS:
        problems.append(f"unknown predict_device {job.predict_device!r}; valid: {', '.join(DEVICE_MODELS)}")
    if job.card_gib is not None and job.card_gib <= 0:
        problems.append(f"card_gib must be a positive number of GiB, got {job.card_gib:g}")
    return problems


def device_problems(device: str, skip_predicted_oom: bool, card_gib) -> list[str]:
    """A device this machine does not have, named before any cell runs (CUDA left uninitialised)."""
    if not DEVICE_PATTERN.match(device):
        return [f"unknown device {device!r}; valid: auto, cpu, cuda, cuda:N"]
    resolved = environment.resolve_device(device)
    if resolved.startswith("cuda"):
        import torch

        if not torch.backends.cuda.is_built():
            return [
                f"device={device}, but this torch ({torch.__version__}) was built without CUDA: install a CUDA "
                f"build of torch, or use device=cpu"
            ]
        visible = gpus.count()
        if gpus.device_index(resolved) >= visible:
            return [
                f"device={device}, but {visible} GPU(s) are visible to this process (NVML, CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
            ]
    if skip_predicted_oom and card_gib is None:
        if resolved == "cpu":
            return ["skip_predicted_oom on a CPU needs a card size: set card_gib"]
    return []


def job_problems(job: DictConfig) -> list[str]:
    """What the typed config cannot say by itself (Hydra already refused unknown keys, wrong types
    and words outside the enums): ranges, builders, devices, launchers."""
    problems = []
    if job.quantization.name not in QUANTIZATION_NAMES:
        problems.append(f"unknown quantization {job.quantization.name!r}; valid: {', '.join(QUANTIZATION_NAMES)}")
    problems += builder_problems(job) + measure_problems(job) + prediction_problems(job) + launcher_problems(job)
    if not job.predict and not runs_elsewhere(job):
        problems += device_problems(str(job.device), bool(job.skip_predicted_oom), job.card_gib)
    return problems


def validate(jobs: list[DictConfig], problems: list[str] | None = None) -> None:
    """SweepConfigError listing every problem of every distinct job (and any given); nothing is
    written (a database is opened only when everything else is right)."""
    problems = [*(problems or []), *(p for job in jobs for p in job_problems(job))]
    if not problems:
        for url in sorted({str(job.db.url) for job in jobs}):
            try:
                store.check_url(url)
            except store.StoreError as error:
                problems.append(str(error))
    if problems:
        unique = list(dict.fromkeys(problems))
        raise SweepConfigError("the sweep cannot start:\n  " + "\n  ".join(unique))
