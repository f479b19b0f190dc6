"""launcher=pod and launcher=ray-cluster: each cell is a Ray task (hydra-ray-launcher), with what a
cluster needs around it.

- A task whose worker died (killed, OOM-killed by the host, its node lost) leaves its cell `crashed`
  and the other cells go on; Ray does not retry a cell (the presets set max_retries: 0), since a cell
  that killed its worker would kill the next one too. The crash is recorded by a small task with the
  cell's own resources, so it lands in the run of the hardware the cell ran on, not the driver's.
- A cell asking for more GPUs than any node of the cluster has is one line before anything runs,
  instead of a sweep that waits forever for a node that will never come.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf


def runs_elsewhere(job) -> bool:
    """launcher=ray-cluster joins a cluster (ray_address): its nodes' devices, not this machine's."""
    return OmegaConf.select(job, "ray_address") is not None


def config_problems(job) -> list[str]:
    """A cluster's resources are checked once it is joined (resource_problem), before any task starts."""
    return []


def launch_tasks(launcher, job_overrides, initial_job_idx: int) -> list:
    """Start one Ray task per job, then collect each one's JobReturn (or record its crash)."""
    import ray
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals
    from hydra_plugins.hydra_ray_launcher._launcher_util import launch_job_on_ray, start_ray
    from omegaconf import open_dict

    setup_globals()
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    init = launcher.ray_cfg.init
    if init.get("address") is None:  # a local instance: a small object store, as hydra-ray-launcher sets
        init.setdefault("object_store_memory", 78643200)
    try:
        start_ray(init)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise SystemExit(f"ckpt-sweep: cannot start or join Ray (address {init.get('address')}): {error}") from None
    problem = resource_problem(launcher.ray_cfg.remote, ray.nodes())
    if problem:
        raise SystemExit(f"ckpt-sweep: {problem}")
    started = []
    for number, overrides in enumerate(job_overrides, start=initial_job_idx):
        config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = f"job_id_for_{number}"
            config.hydra.job.num = number
        task = launch_job_on_ray(
            launcher.hydra_context, launcher.ray_cfg.remote, config, launcher.task_function, Singleton.get_state()
        )
        started.append((config, task))
    return collect(launcher.ray_cfg.remote, started)


def collect(remote, started: list) -> list:
    """Each task's JobReturn, in the jobs' order, taken as each ends so the driver's progress bar
    moves (a dead worker's cell recorded `crashed` first)."""
    import ray

    from sweep.run import progress

    returns: list = [None] * len(started)
    pending = {task: number for number, (_, task) in enumerate(started)}
    while pending:
        (task,), _ = ray.wait(list(pending), num_returns=1)
        number = pending.pop(task)
        try:
            returns[number] = ray.get(task)
        except ray.exceptions.RayError as error:  # the worker or its node died: nothing was recorded
            returns[number] = record_crash_on_ray(remote, started[number][0], error)
        progress.job_ended(returns[number])
    return returns


def resource_problem(remote, nodes: list[dict]) -> str | None:
    gpus = float(remote.get("num_gpus") or 0)
    most = max((node["Resources"].get("GPU", 0) for node in nodes if node.get("Alive")), default=0)
    if gpus > most:
        return (
            f"each cell asks for {gpus:g} GPU(s) (hydra.launcher.ray.remote.num_gpus), but the largest node of "
            f"this Ray cluster has {most:g}: the sweep would wait forever; set "
            f"hydra.launcher.ray.remote.num_gpus=0 for CPU cells"
        )
    return None


def crash_reason(error: BaseException) -> str:
    first = (str(error).strip().splitlines() or [""])[0]
    return f"the Ray worker running the cell died before it recorded anything ({type(error).__name__}: {first})"


def record_crash_on_ray(remote, config, error: BaseException):
    import ray
    from omegaconf import OmegaConf

    options = {**OmegaConf.to_container(remote, resolve=True), "max_retries": 0}
    return ray.get(ray.remote(**options)(_record_crash).remote(config, crash_reason(error)))


def _record_crash(config, reason: str):
    """On a Ray worker: record the crashed cell as the cell's own task would have."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import JobReturn, JobStatus, setup_globals

    from sweep.run.app import record_crash

    setup_globals()
    HydraConfig.instance().set_config(config)
    ret = JobReturn(status=JobStatus.COMPLETED)
    ret.return_value = record_crash(config, reason)
    return ret
