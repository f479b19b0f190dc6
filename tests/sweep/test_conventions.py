"""What a command-line user expects of any tool: `--version`, a mistyped name answered with the
closest ones in one line, a quoted value taken as the value."""

import pytest

from sweep.config.structured import group_options
from tests.support.sweeps import FAST, query, run_cli, run_sweep


def test_version():
    from importlib.metadata import version

    shown = run_cli(["--version"])
    assert shown.returncode == 0 and shown.stdout.strip() == f"ckpt-sweep {version('ckpt-sweep')}"


@pytest.mark.parametrize(
    "override, message",
    [
        ("mode=layer,unslth", "mode=layer,unslth: unknown value 'unslth'; did you mean 'unsloth' or 'unsloth-ffn'?"),
        ("family=flux", "family=flux: unknown value 'flux'; did you mean 'flux2' or 'flux1'?"),
        ("sweep=packed-latent", "sweep=packed-latent: unknown value 'packed-latent'; did you mean 'packed-latents'?"),
        ("launcher=slrum", "launcher=slrum: unknown value 'slrum'; did you mean 'slurm'?"),
        ("training=frozn", "training=frozn: unknown value 'frozn'; did you mean 'frozen'?"),
        ("quantization=nf4", "quantization=nf4: unknown value 'nf4'; valid: fp8-torchao, int8-sdnq, "),
    ],
)
def test_a_mistyped_name_gets_the_closest_ones_in_one_line(tmp_path, override, message):
    done = run_sweep(tmp_path / "r.db", "sweep=none", "preset=tiny", override)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"ckpt-sweep: {message}"), line
    assert not (tmp_path / "r.db").exists()


def test_every_group_lists_its_files_and_stored_configs():
    assert {"layer", "unsloth", "seg2-stride4-offload"} <= set(group_options("mode"))  # stored from ckptlib
    assert {"packed-latents", "none", "families-tiny"} <= set(group_options("sweep"))  # conf/sweep/*.yaml
    assert set(group_options("launcher")) == {"local", "pod", "ray-cluster", "slurm"}


def test_a_quoted_value_is_the_value(tmp_path):
    db = tmp_path / "r.db"
    done = run_sweep(db, "sweep=none", "preset=tiny", "mode='layer'", "training='frozen'", *FAST[:2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert query(db, "select mode, training, status from cells") == [("layer", "frozen", "ok")]


def test_hydras_completion_completes_after_the_run_verb(monkeypatch):
    """The script `ckpt-sweep run -sc install=bash` installs calls the bare command with the line typed."""
    installed = run_cli(["run", "-sc", "install=bash"])
    assert installed.returncode == 0 and "complete -o nospace -o default -F hydra_bash_completion" in installed.stdout
    for typed, offered in [("mode=la", "mode=layer"), ("sweep=packed-l", "sweep=packed-latents")]:
        line = f"ckpt-sweep run {typed}"
        monkeypatch.setenv("COMP_LINE", line)
        monkeypatch.setenv("COMP_POINT", str(len(line)))
        answered = run_cli(["-sc", "query=bash"])
        assert answered.returncode == 0 and answered.stdout.split() == [offered], answered.stderr


def test_run_help_names_the_tool_and_its_groups():
    shown = run_cli(["run", "--help"])
    assert shown.returncode == 0 and shown.stdout.startswith("ckpt-sweep run: measure (or, with predict=true, predict)")
    assert "powered by Hydra" not in shown.stdout and "\nmode: activation-offload, interval2, layer," in shown.stdout
