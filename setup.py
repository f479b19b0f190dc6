"""The Hydra configs live at the top of the checkout (conf/) and ship inside the package (sweep.conf):
this maps one onto the other when the wheel is built. The sweeper and launchers ship in Hydra's
plugin namespace (hydra_plugins has no __init__, as Hydra requires). Everything else is in
pyproject.toml."""

from pathlib import Path

from setuptools import find_namespace_packages, find_packages, setup

CONF = ["sweep.conf", *(f"sweep.conf.{folder.name}" for folder in sorted(Path("conf").iterdir()) if folder.is_dir())]

setup(
    packages=[
        *find_packages(include=["ckptlib*", "sweep*"]),
        *find_namespace_packages(include=["hydra_plugins.ckpt_sweep"]),
        *CONF,
    ],
    package_dir={"sweep.conf": "conf"},
)
