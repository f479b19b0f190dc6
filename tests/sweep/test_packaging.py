"""The installed wheel, not the checkout: configs and published tables ship inside the package,
and `ckpt-sweep run` works from any directory."""

import shutil
import site
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.sweeps import ROOT


def clean_source(tmp_path: Path) -> Path:
    """The tracked files only, as a clean clone has them (a checkout's build/ would leak stale modules
    into the wheel)."""
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    return source


@pytest.mark.long
def test_the_wheel_runs_a_sweep_outside_the_checkout(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)]
        + [str(clean_source(tmp_path))],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    [wheel] = wheels.glob("ckpt_sweep-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"sweep/conf/config.yaml", "sweep/conf/sweep/cpu-demo.yaml", "sweep/conf/launcher/slurm.yaml"} <= set(names)
    assert "sweep/published/unsloth-synthetic.md" in names
    assert not [n for n in names if n.startswith(("tests/", "scripts/"))], "the wheel ships the packages only"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # ensurepip: 5 s of CPU
    python = venv / "bin" / "python"
    install = ["install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *install], check=True)
    # The dependencies come from this test's environment (a path, so its editable checkout is not picked up).
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (
        venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "deps.pth"
    ).write_text("\n".join(site.getsitepackages()) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [python, "-c", "import sweep; print(sweep.__file__)"], capture_output=True, text=True, cwd=elsewhere, check=True
    ).stdout
    assert where.startswith(purelib), where  # the installed package, not the checkout
    done = subprocess.run(
        [
            venv / "bin" / "ckpt-sweep",
            "run",
            "sweep=none",
            "preset=tiny",
            "mode=none,layer",
            "measure.warmup_steps=0",
            "measure.steps=1",
        ],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with sqlite3.connect(elsewhere / "results.db") as db:
        assert db.execute("select mode, status from cells order by mode").fetchall() == [
            ("layer", "ok"),
            ("none", "ok"),
        ]
    imported = subprocess.run(
        [venv / "bin" / "ckpt-sweep", "import", "--docs", "--db", "published.db"],  # a plain path: SQLite
        capture_output=True,
        text=True,
        cwd=elsewhere,
    )
    assert imported.returncode == 0 and "imported 6 published run(s)" in imported.stdout, (
        imported.stderr
    )  # the docs' and SimpleTuner's
    # the sweeper's and launchers' plugin module ships in Hydra's namespace, where Hydra finds it
    assert "hydra_plugins/ckpt_sweep/__init__.py" in names
    found = subprocess.run(
        [python, "-c", "from hydra.core.plugins import Plugins; print(sorted(Plugins.instance().class_name_to_class))"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        check=True,
    ).stdout
    assert "hydra_plugins.ckpt_sweep.RayLauncher" in found and "hydra_plugins.ckpt_sweep.SlurmLauncher" in found
