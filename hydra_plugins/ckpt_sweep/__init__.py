"""ckpt-sweep's launchers, declared where Hydra accepts launchers (it instantiates plugin classes of
the hydra_plugins package only): hydra-submitit-launcher's SLURM launcher and hydra-ray-launcher's
Ray launcher, each with what a real cluster needs around it (sweep/launchers/). Each answers for
itself before anything runs (sweep/run/preflight.py): `config_problems(job)`, one line per problem,
and `runs_elsewhere(job)`. Without the scale extra they still answer: that the extra is missing."""

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _SubmititSlurmLauncher
except ImportError as error:
    _SubmititSlurmLauncher, _slurm_missing = None, error

try:
    from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher as _HydraRayLauncher
except ImportError as error:
    _HydraRayLauncher, _ray_missing = None, error


def _missing(launcher: str, error: ImportError):
    class Missing:
        """Stands for a launcher whose package is not installed: preflight says so, nothing runs."""

        @staticmethod
        def config_problems(job) -> list[str]:
            return [f"launcher={launcher} needs the scale extra (pip install 'ckpt-sweep[scale]'): {error}"]

        @staticmethod
        def runs_elsewhere(job) -> bool:
            return False

    return Missing


if _SubmititSlurmLauncher is not None:
    from sweep.launchers import slurm

    class SlurmLauncher(_SubmititSlurmLauncher):
        """launcher=slurm: one job array, checked against the partition first (sweep/launchers/slurm.py)."""

        config_problems = staticmethod(slurm.config_problems)

        @staticmethod
        def runs_elsewhere(job) -> bool:
            return True

        def __call__(self, *args, **kwargs):  # in the array task
            return slurm.run_task(super().__call__, *args, **kwargs)

        def launch(self, job_overrides, initial_job_idx):
            return slurm.launch_array(self, job_overrides, initial_job_idx)

else:
    SlurmLauncher = _missing("slurm", _slurm_missing)


if _HydraRayLauncher is not None:
    from sweep.launchers import ray_tasks

    class RayLauncher(_HydraRayLauncher):
        """launcher=pod and launcher=ray-cluster: a Ray task per cell (sweep/launchers/ray_tasks.py)."""

        config_problems = staticmethod(ray_tasks.config_problems)
        runs_elsewhere = staticmethod(ray_tasks.runs_elsewhere)

        def launch(self, job_overrides, initial_job_idx):
            return ray_tasks.launch_tasks(self, job_overrides, initial_job_idx)

else:
    RayLauncher = _missing("pod / ray-cluster", _ray_missing)
