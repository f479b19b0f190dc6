"""A newcomer's first hour: a model of your own from its own folder, builders that fail fast and say
why, a CPU that refuses a GPU's cell, and runs that keep third-party chatter off the terminal."""

import os
import sqlite3
import subprocess
import sys

import pytest

from tests.support.sweeps import ROOT, run_cli


def ckpt_sweep(cwd, *args, timeout=600):
    """The console script as a user runs it: from `cwd`, with no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "sweep.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**env, "PYTHONSAFEPATH": "1"},
        timeout=timeout,
    )


RUN_MINE = ["run", "sweep=none", "family.name=mine", "measure.warmup_steps=1", "measure.steps=2"]


@pytest.mark.long
def test_a_new_family_runs_from_its_own_folder(tmp_path):
    made = ckpt_sweep(tmp_path, "new-family", "my_model")
    assert made.returncode == 0 and (tmp_path / "my_model.py").exists(), made.stderr
    assert "family._target_=my_model.build" in made.stdout
    done = ckpt_sweep(tmp_path, *RUN_MINE, "family._target_=my_model.build", "mode=none,layer,torch-ffn")
    assert done.returncode == 0, done.stderr[-3000:]
    with sqlite3.connect(tmp_path / "results.db") as db:
        cells = db.execute("select preset, mode, status, tokens from cells order by mode").fetchall()
    assert cells == [("small", "layer", "ok", 256), ("small", "none", "ok", 256), ("small", "torch-ffn", "ok", 256)]
    again = ckpt_sweep(tmp_path, "new-family", "my_model")
    assert again.returncode != 0 and "exists already; not overwritten" in again.stderr


@pytest.mark.long
def test_names_the_spec_and_lora_give_that_match_nothing_are_named_before_any_cell(tmp_path):
    """The scaffold with its feed-forward renamed (SPEC still says `ff`): torch-ffn would measure the
    same as none and be recorded ok; and LoRA targets that name no layer. Both refused, one line each."""
    assert ckpt_sweep(tmp_path, "new-family", "my_model").returncode == 0
    source = (tmp_path / "my_model.py").read_text()
    renamed = source.replace("self.ff = ", "self.mlp = ").replace("self.ff(self.norm2(x))", "self.mlp(self.norm2(x))")
    assert renamed != source
    (tmp_path / "my_model.py").write_text(renamed)
    done = ckpt_sweep(tmp_path, *RUN_MINE, "family._target_=my_model.build", "mode=none,torch-ffn")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        "family mine: my_model: feed_forward 'ff' matches no submodule of any block "
        "(a block of 'blocks' has norm1, attn, norm2, mlp)"
    ) in done.stderr
    assert not (tmp_path / "results.db").exists()
    (tmp_path / "my_model.py").write_text(source.replace('["attn.qkv", "attn.out"]', '["attn.to_qkv", "attn.out"]'))
    done = ckpt_sweep(tmp_path, *RUN_MINE, "family._target_=my_model.build", "mode=none")
    assert done.returncode != 0
    assert "family mine: LoRA target(s) 'attn.to_qkv' match no module of the model (its Linear layers are named" in (
        done.stderr
    )


@pytest.mark.long
def test_editing_your_model_measures_its_cells_again_and_says_so(tmp_path):
    """NOTE [ A cell knows the model it measured ]: the same command after the model's width changed
    measures the cell again as a new attempt; unchanged, it is skipped."""
    assert ckpt_sweep(tmp_path, "new-family", "my_model").returncode == 0
    run = [*RUN_MINE, "family._target_=my_model.build", "mode=none", "training=full"]  # no PEFT to preload
    first = ckpt_sweep(tmp_path, *run)
    assert first.returncode == 0
    assert "could not preload" not in first.stdout  # the fork server finds the builder beside the command line
    unchanged = ckpt_sweep(tmp_path, *run)
    assert unchanged.returncode == 0 and '"skipped": true' in unchanged.stdout, unchanged.stdout
    source = (tmp_path / "my_model.py").read_text()
    assert '"small": Shape(width=128,' in source
    (tmp_path / "my_model.py").write_text(source.replace('"small": Shape(width=128,', '"small": Shape(width=96,'))
    edited = ckpt_sweep(tmp_path, *run)
    assert edited.returncode == 0
    assert "1 cell(s) measured again: the model its builder builds changed since it was recorded" in edited.stderr
    with sqlite3.connect(tmp_path / "results.db") as db:
        attempts = db.execute("select attempt, is_current, json_extract(versions, '$.model') from cells").fetchall()
    assert [a[:2] for a in attempts] == [(1, 0), (2, 1)] and attempts[0][2] != attempts[1][2]


def test_a_built_in_familys_name_is_refused_for_your_own(tmp_path):
    refused = ckpt_sweep(tmp_path, "new-family", "flux1")
    assert refused.returncode != 0 and "'flux1' is a built-in family's name" in refused.stderr
    assert not (tmp_path / "flux1.py").exists()


def test_a_builder_that_returns_the_wrong_type_is_named_before_any_cell(tmp_path):
    (tmp_path / "wrong.py").write_text(
        "from torch import nn\n\n\ndef build(preset='p', **kwargs):\n    return nn.Linear(4, 4)\n"
    )
    done = ckpt_sweep(tmp_path, *RUN_MINE, "family._target_=wrong.build", "mode=none")
    assert done.returncode != 0
    assert "family mine: build() returned Linear, expected ckptlib.Workload" in done.stderr
    assert not (tmp_path / "results.db").exists()


def test_a_builder_that_fails_at_import_says_how(tmp_path):
    (tmp_path / "broken.py").write_text("import no_such_package_here\n")
    done = ckpt_sweep(tmp_path, *RUN_MINE, "family._target_=broken.build", "mode=none")
    assert done.returncode != 0
    assert (
        "cannot import builder 'broken.build' (ModuleNotFoundError: No module named 'no_such_package_here')"
        in done.stderr
    )


def test_a_builder_with_the_wrong_signature_is_named(tmp_path):
    (tmp_path / "narrow.py").write_text("def build(preset):\n    return None\n")
    done = ckpt_sweep(tmp_path, *RUN_MINE, "family._target_=narrow.build", "mode=none")
    assert (
        done.returncode != 0 and "does not take training, device, lora_rank, seed, dtype, quantization" in done.stderr
    )


@pytest.mark.long
def test_a_cpu_refuses_a_real_size_preset_it_cannot_hold(tmp_path):
    """Flux.1 dev at 1024x1024 on this host: predicted (seconds, nothing allocated), recorded
    predicted-oom with the numbers; nothing is built."""
    done = run_cli(
        [
            "run",
            "sweep=none",
            "family=flux1",
            "preset=dev",
            "mode=layer",
            "device=cpu",
            f"db.url=sqlite:///{tmp_path / 'r.db'}",
            f"hydra.sweep.dir={tmp_path / 'multirun'}",
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with sqlite3.connect(tmp_path / "r.db") as db:
        [(status, reason, timings)] = db.execute("select status, reason, timings from cells").fetchall()
    assert status == "predicted-oom" and "GiB of host memory, more than the" in reason
    assert "run.allow_large_cpu=true measures it anyway" in reason and '"build_s"' not in timings


@pytest.mark.long
def test_third_party_chatter_goes_to_the_runs_log(tmp_path):
    done = ckpt_sweep(
        ROOT,
        "run",
        "sweep=none",
        "preset=tiny",
        "mode=none",
        "measure.warmup_steps=0",
        "measure.steps=1",
        "quantization=int8-torchao",
        "dtype=bf16",
        f"db.url=sqlite:///{tmp_path / 'r.db'}",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for noise in ("Failed to load", "is an Enum subclass", "Detected no triton", "FutureWarning"):
        assert noise not in done.stderr, noise
    [log] = (tmp_path / "multirun" / "logs").glob("*.log")
    assert "torchao" in log.read_text() and str(log) in done.stderr


QUIET_DIFFUSERS = """
import sys
from sweep.run import quiet
quiet.install(sys.argv[1])
from diffusers.utils import logging  # attaches its own stderr handler on first use, after install
logging.get_logger("diffusers.quantizers.torchao").warning("Unable to import `torchao` Tensor objects")
quiet.flush()
"""


def test_a_librarys_own_terminal_handler_does_not_bring_its_chatter_back(tmp_path):
    """diffusers' first logger attaches a stderr handler of its own (after the chatter was routed):
    its warnings reach the run's log only."""
    log = tmp_path / "run.log"
    done = subprocess.run(
        [sys.executable, "-c", QUIET_DIFFUSERS, str(log)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Unable to import" not in done.stderr, done.stderr
    assert "diffusers.quantizers.torchao WARNING Unable to import `torchao` Tensor objects" in log.read_text()


def test_checking_and_fingerprinting_your_model_import_no_peft_nor_torchs_compiler(tmp_path):
    """NOTE [ Building to inspect ]: the process that starts a sweep builds your model to check it and
    to fingerprint each cell without importing PEFT, torchao, torch's compiler or sympy (seconds of
    CPU); the cells inject the adapters and quantize the base. The scaffold's builder and the
    synthetic one draw with ckptlib.workload.random_normal: on meta, randn_like imports torch._dynamo
    (1 s of every sweep's start) and randn sympy (0.3 s)."""
    from sweep.config.scaffold import new_family

    new_family("my_model", tmp_path)
    script = (
        "import sys\n"
        "from sweep.config.builders import built_problems, fingerprint, import_builder\n"
        "assert built_problems('faulty.build', 'ok', {}) == []\n"
        "assert built_problems('faulty.build', 'ok-wide', {}) == []\n"
        "assert built_problems('my_model.build', 'small', {}) == []\n"
        "assert fingerprint('faulty.build', 'ok', '{}', 'lora', 16, 'none').startswith('m2-')\n"
        "assert fingerprint('faulty.build', 'ok', '{}', 'lora', 16, 'int8-torchao').startswith('m2-')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'peft', 'transformers', 'torchao'}"
        " or m in {'torch._dynamo', 'sympy'}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout[-2000:] + done.stderr[-2000:]
