"""ckpt-sweep's launchers, declared where Hydra accepts launchers (it instantiates plugin classes of
the hydra_plugins package only): hydra-submitit-launcher's SLURM launcher and hydra-ray-launcher's
Ray launcher, each with what a real cluster needs around it (sweep/slurm.py, sweep/ray_tasks.py).
Without the scale extra neither exists, and validation says so."""

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _SubmititSlurmLauncher
except ImportError:
    _SubmititSlurmLauncher = None

try:
    from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher as _HydraRayLauncher
except ImportError:
    _HydraRayLauncher = None


if _SubmititSlurmLauncher is not None:
    from sweep import slurm

    class SlurmLauncher(_SubmititSlurmLauncher):
        """launcher=slurm: one job array, checked against the partition first (sweep/slurm.py)."""

        def __call__(self, *args, **kwargs):  # in the array task
            return slurm.run_task(super().__call__, *args, **kwargs)

        def launch(self, job_overrides, initial_job_idx):
            return slurm.launch_array(self, job_overrides, initial_job_idx)


if _HydraRayLauncher is not None:
    from sweep import ray_tasks

    class RayLauncher(_HydraRayLauncher):
        """launcher=pod and launcher=ray-cluster: a Ray task per cell (sweep/ray_tasks.py)."""

        def launch(self, job_overrides, initial_job_idx):
            return ray_tasks.launch_tasks(self, job_overrides, initial_job_idx)
