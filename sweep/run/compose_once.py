"""Each job's config composed once.

Hydra composes every job twice in the driver: the sweeper to validate the batch before anything
runs, then the launcher (about a tenth of a second a job on two cores: most of a tiny cell's cost
in the parent). Our preflight composes jobs too, before either (sweep/run/preflight.py). The
loader keeps what it composed for a set of overrides until the launcher has asked for it: the
launcher's call is the last in the driver. A launcher that composes elsewhere leaves them held
until the sweep ends.
"""

from __future__ import annotations

# Configs held at once: past this, a job composes again rather than hold every job's config.
MAX_HELD = 512


def compose_each_job_once(loader) -> None:
    """Wrap `loader.load_sweep_config` (this sweep's loader, not Hydra's class) so that its later
    calls with the same overrides return the first call's config, and add `compose_ahead`, the
    preflight's call, after which the sweeper's two are still to come."""
    if getattr(loader, "composes_once", False):
        return
    compose, held = loader.load_sweep_config, {}

    def composed(master, overrides, calls_to_come: int):
        key = tuple(overrides)
        if key in held:
            config, left = held.pop(key)
            if left > 1:
                held[key] = (config, left - 1)
            return config
        config = compose(master, overrides)
        if len(held) < MAX_HELD:
            held[key] = (config, calls_to_come)
        return config

    def load_sweep_config(master_config, sweep_overrides):  # Hydra's names: it passes them by keyword
        return composed(master_config, sweep_overrides, calls_to_come=1)  # the launcher's, after validation

    def compose_ahead(master_config, sweep_overrides):
        return composed(master_config, sweep_overrides, calls_to_come=2)  # validation's, then the launcher's

    loader.load_sweep_config, loader.compose_ahead = load_sweep_config, compose_ahead
    loader.composes_once = True
