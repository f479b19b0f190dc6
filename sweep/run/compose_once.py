"""Each job's config composed once.

Hydra composes every job twice in the driver: the sweeper to validate the batch before anything
runs, then the launcher (about a quarter of a second a job, most of a tiny cell's cost in the
parent). The loader keeps what the first call for a set of overrides composed and hands it to the
second; a launcher that composes elsewhere leaves them held until the sweep ends.
"""

from __future__ import annotations

# Configs held at once: past this, a job composes twice rather than hold every job's config.
MAX_HELD = 512


def compose_each_job_once(loader) -> None:
    """Wrap `loader.load_sweep_config` (this sweep's loader, not Hydra's class) so that its second
    call with the same overrides returns the first call's config."""
    if getattr(loader, "composes_once", False):
        return
    compose, held = loader.load_sweep_config, {}

    def load_sweep_config(master_config, sweep_overrides):
        key = tuple(sweep_overrides)
        if key in held:
            return held.pop(key)
        composed = compose(master_config, sweep_overrides)
        if len(held) < MAX_HELD:
            held[key] = composed
        return composed

    loader.load_sweep_config = load_sweep_config
    loader.composes_once = True
