"""Everything that would make cells fail for a reason of the sweep's own making, named before any
cell runs: one line per problem, nothing written."""
from __future__ import annotations

import os
import re

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from ckptlib.quantize import NAMES as QUANTIZATION_NAMES
from ckptlib.workload import TRAINING_MODES

from . import environment, gpus, store
from .builders import BuilderError, builder_presets, import_builder, signature_problems
from .cell import DTYPES

RERUN_CHOICES = ("none", "failed", "all")
DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
# The config keys `validate` reads: jobs that differ only in other keys need no separate check.
VALIDATED_KEYS = ("family", "preset", "training", "db", "run", "sweep", "predict", "predict_device", "card_gib",
                  "skip_predicted_oom", "device", "dtype", "quantization", "launcher", "measure")


class SweepConfigError(ValueError):
    """The sweep cannot start; nothing was run or written."""


def expand_jobs(config: DictConfig) -> tuple[int, list[DictConfig]] | None:
    """The number of jobs a basic-sweeper multirun will run, and one composed config for every
    distinct combination of the validated keys (composing each of hundreds of jobs takes seconds)."""
    if "BasicSweeper" not in str(config.hydra.sweeper.get("_target_", "")):
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    loader = GlobalHydra.instance().config_loader()
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(params + list(config.hydra.overrides.task))
    total = sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None))
    relevant = [o for o in parsed if o.get_key_element().lstrip("+~").split(".")[0] in VALIDATED_KEYS]
    combinations = [job for batch in BasicSweeper.split_arguments(relevant, None) for job in batch]
    return total, [loader.load_sweep_config(config, list(job)) for job in combinations]


def job_value(job: DictConfig, key: str):
    """A key of a composed job config whose value interpolates `${hydra:...}` (run.name)."""
    from hydra.core.hydra_config import HydraConfig

    hydra_config = HydraConfig.instance()
    previous = hydra_config.cfg
    hydra_config.set_config(job)
    try:
        return OmegaConf.select(job, key)
    finally:
        hydra_config.cfg = previous


def _whole(value, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def measure_problems(job: DictConfig) -> list[str]:
    measure, problems = job.measure, []
    if not _whole(measure.steps, 1):
        problems.append(f"measure.steps must be a whole number of steps, at least 1, got {measure.steps!r}")
    if not _whole(measure.warmup_steps, 0):
        problems.append(f"measure.warmup_steps must be a whole number, 0 or more, got {measure.warmup_steps!r}")
    if not isinstance(measure.timeout_s, (int, float)) or isinstance(measure.timeout_s, bool) or measure.timeout_s <= 0:
        problems.append(f"measure.timeout_s must be a positive number of seconds, got {measure.timeout_s!r}")
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
    return problems


def launcher_problems(job: DictConfig) -> list[str]:
    target = str(OmegaConf.select(job, "hydra.launcher._target_") or "")
    if "SlurmLauncher" in target and str(job.db.url).startswith("sqlite"):
        return ["launcher=slurm runs cells on many nodes, which cannot share a SQLite file safely: "
                "set db.url to a PostgreSQL URL (postgresql+psycopg://user:password@host/database)"]
    return []


def prediction_problems(job: DictConfig) -> list[str]:
    from ckptlib.predict import DEVICE_MODELS

    problems = []
    if job.predict_device not in DEVICE_MODELS:
        problems.append(f"unknown predict_device {job.predict_device!r}; valid: {', '.join(DEVICE_MODELS)}")
    if job.card_gib is not None:
        try:
            if float(job.card_gib) <= 0:
                raise ValueError
        except (TypeError, ValueError):
            problems.append(f"card_gib must be a positive number of GiB, got {job.card_gib!r}")
    return problems


def device_problems(device: str, skip_predicted_oom: bool, card_gib) -> list[str]:
    """A device this machine does not have, named before any cell runs (CUDA left uninitialised)."""
    if not DEVICE_PATTERN.match(device):
        return [f"unknown device {device!r}; valid: auto, cpu, cuda, cuda:N"]
    resolved = environment.resolve_device(device)
    if resolved.startswith("cuda"):
        import torch

        if not torch.backends.cuda.is_built():
            return [f"device={device}, but this torch ({torch.__version__}) was built without CUDA: install a CUDA "
                    f"build of torch, or use device=cpu"]
        visible = gpus.count()
        if gpus.device_index(resolved) >= visible:
            return [f"device={device}, but {visible} GPU(s) are visible to this process (NVML, CUDA_VISIBLE_DEVICES="
                    f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"]
    if skip_predicted_oom and card_gib is None:
        if resolved == "cpu":
            return ["skip_predicted_oom on a CPU needs a card size: set card_gib"]
        gpu = environment.gpu_info(resolved)
        if gpu.get("memory_bytes") is None:
            return [f"skip_predicted_oom needs the card's memory, and NVML cannot tell it for {resolved} "
                    f"({gpu.get('memory_note') or 'no NVML'}): set card_gib"]
    return []


def job_problems(job: DictConfig) -> list[str]:
    problems = []
    if job.run.rerun not in RERUN_CHOICES:
        problems.append(f"run.rerun must be one of {', '.join(RERUN_CHOICES)}, got {job.run.rerun!r}")
    if job.training not in TRAINING_MODES:
        problems.append(f"unknown training mode {job.training!r}; valid modes: {', '.join(TRAINING_MODES)}")
    if job.dtype != "auto" and job.dtype not in DTYPES:
        problems.append(f"unknown dtype {job.dtype!r}; valid: auto, {', '.join(DTYPES)}")
    if job.quantization.name not in QUANTIZATION_NAMES:
        problems.append(f"unknown quantization {job.quantization.name!r}; valid: {', '.join(QUANTIZATION_NAMES)}")
    problems += builder_problems(job) + measure_problems(job) + prediction_problems(job) + launcher_problems(job)
    if not job.predict:
        problems += device_problems(str(job.device), bool(job.skip_predicted_oom), job.card_gib)
    return problems


def validate(jobs: list[DictConfig]) -> None:
    """SweepConfigError listing every problem of every distinct job; nothing is written (a database
    is opened, and created where it does not exist, only when everything else is right)."""
    problems = [p for job in jobs for p in job_problems(job)]
    if not problems:
        for url in sorted({str(job.db.url) for job in jobs}):
            try:
                store.check_url(url)
            except store.StoreError as error:
                problems.append(str(error))
    if problems:
        unique = list(dict.fromkeys(problems))
        raise SweepConfigError("the sweep cannot start:\n  " + "\n  ".join(unique))
