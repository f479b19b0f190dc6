"""The tree shows the pipeline: config -> cells -> worker -> database -> reports. Every import of
sweep/ (function-local ones too) points down the stages, no module imports itself round a cycle,
and ckptlib knows nothing of the harness."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What each stage of sweep/ may import besides itself (and ckptlib, and the package root).
ALLOWED = {
    "vocabulary": set(),
    "machine": {"vocabulary"},
    "config": {"vocabulary", "machine"},
    "store": {"vocabulary", "machine", "config"},
    "run": {"vocabulary", "machine", "config", "store"},
    "launchers": {"vocabulary", "machine", "config", "store", "run"},
    "report": {"vocabulary", "machine", "config", "store"},
    "plan": {"vocabulary", "machine", "config", "store", "report"},
    "acceptance": {"vocabulary", "machine", "config", "store", "run", "report", "cli"},  # runs sweeps as a user would
}
ENTRY_POINTS = {"cli"}  # the command line composes every stage


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").exists() or path.is_dir()


def imported(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in it, by dotted name."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:  # `from package import module` imports the module
                found.add(f"{base}.{alias.name}" if exists(f"{base}.{alias.name}") else base)
    return found


def stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "sweep" and len(parts) > 1 else None


def sweep_modules() -> dict[str, set[str]]:
    return {module_name(p): imported(p) for p in sorted((ROOT / "sweep").rglob("*.py"))}


def upward_imports() -> list[str]:
    wrong = []
    for module, targets in sweep_modules().items():
        own = stage(module)
        if own in ENTRY_POINTS or own is None:
            continue
        for target in targets:
            other = stage(target)
            if other is not None and other != own and other not in ALLOWED[own]:
                wrong.append(f"{module} -> {target} ({own} may not import {other})")
    return wrong


def cycles() -> list[str]:
    graph = {m: {t for t in targets if t.startswith("sweep.")} for m, targets in sweep_modules().items()}
    state, found = {}, []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                found.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])
    # a package's __init__ importing its own modules is how a package is made, not a cycle
    return [c for c in found if not c.split(" -> ")[0] == c.split(" -> ")[-2].rpartition(".")[0]]


def test_every_import_of_sweep_points_down_the_stages():
    assert upward_imports() == []
    assert set(ALLOWED) | ENTRY_POINTS == {stage(m) for m in sweep_modules() if stage(m)}  # every stage is ruled


def test_no_module_of_sweep_imports_itself_round_a_cycle():
    assert cycles() == []


@pytest.mark.parametrize("harness", ["sweep", "hydra", "omegaconf", "sqlalchemy", "pandas"])
def test_ckptlib_knows_nothing_of_the_harness(harness):
    users = [
        module_name(p)
        for p in sorted((ROOT / "ckptlib").rglob("*.py"))
        if any(t == harness or t.startswith(harness + ".") for t in imported(p))
    ]
    assert users == []


def test_the_checker_sees_an_upward_import_and_a_cycle(tmp_path, monkeypatch):
    """The walker itself: a function-local import of a higher stage and a two-module cycle."""
    for folder in ("sweep/store", "sweep/report"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "sweep/__init__.py").write_text("")
    (tmp_path / "sweep/store/query.py").write_text("def f():\n    from sweep.report import text\n")
    (tmp_path / "sweep/report/text.py").write_text("from sweep.store import query\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    graph = sweep_modules()
    assert graph["sweep.store.query"] == {"sweep.report.text"}
    assert upward_imports() == ["sweep.store.query -> sweep.report.text (store may not import report)"]
    assert cycles() == ["sweep.report.text -> sweep.store.query -> sweep.report.text"]


def test_the_verbs_that_read_results_import_no_torch():
    """advise and runs read the database and print, plan's help lists its options and plan refuses
    a card it does not know: torch (2 s of imports) is not theirs to load.
    ckptlib's names are imported on first use; its units, configs, modes, quantization registry and
    device models, and sweep's cell fields, import no torch."""
    import subprocess
    import sys

    db = f"sqlite:///{ROOT / 'results.db'}"  # the shipped one, read only
    advise = ["advise", "--family", "synthetic", "--preset", "docs-large", "--card", "RTX 4090", "--db", db]
    bad_plan = ["plan", "--family", "flux1", "--card", "TPU v5", "--db", db]
    script = (
        "import sys\nfrom sweep import cli\n"
        "from ckptlib import TRAINING_MODES, available_host_bytes\n"
        "from ckptlib.names import ATTENTION_BACKENDS\n"
        f"for verb in ({advise!r}, ['runs', '--db', {db!r}], ['plan', '--help'], {bad_plan!r}):\n"
        "    try:\n        cli.main(verb)\n    except SystemExit as stop:\n        print(stop.code)\n"
        "print(sorted(m for m in ('torch', 'peft', 'diffusers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "use: none (no checkpointing)" in done.stdout  # advise read the cells and chose
    assert "unknown card 'TPU v5'" in done.stdout
    assert done.stdout.splitlines()[-1] == "[]", done.stdout + done.stderr


def test_a_sweeps_own_process_imports_no_torch_and_records_what_its_cells_child_told(tmp_path):
    """NOTE [ A sweep's own process imports no torch ]: `ckpt-sweep run` of the synthetic family, of
    a diffusers family (LoRA, so PEFT too) and of a builder of one's own (tests/support/faulty.py:
    checked and fingerprinted by building it) measures its cells in children and records torch's
    facts and the model's fingerprint from one, while the process itself never imports torch, PEFT
    or diffusers. The script is piped to `python -`, whose main has no file a child could run again
    (NOTE [ A main script read from standard input ], sweep/run/isolation.py)."""
    import json
    import sqlite3
    import subprocess
    import sys

    db = tmp_path / "results.db"
    common = [f"db.url=sqlite:///{db}", f"hydra.sweep.dir={tmp_path}/multirun", "sweep=none", "measure.steps=1"]
    common += ["measure.warmup_steps=0", f"hydra.searchpath=[file://{ROOT / 'tests' / 'support' / 'conf'}]"]
    sweeps = [
        [*common, "preset=tiny", "mode=none,layer", "training=full"],
        [*common, "preset=tiny", "family=flux1", "mode=torch-ffn", "training=lora"],
        [*common, "family=faulty", "preset=ok", "mode=none", "training=full"],
    ]
    script = (
        "import sys\nfrom sweep import cli\n"
        f"for overrides in {sweeps!r}:\n"
        "    try:\n        cli.main(['run', *overrides])\n    except SystemExit as stop:\n        print(stop.code)\n"
        "print(sorted(m for m in ('torch', 'peft', 'diffusers') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-"], input=script, capture_output=True, text=True, cwd=tmp_path, timeout=600
    )
    assert done.stdout.splitlines()[-1] == "[]", done.stdout[-2000:] + done.stderr[-2000:]
    with sqlite3.connect(db) as connection:
        cells = connection.execute(
            "select family, mode, status, json_extract(versions, '$.model') from cells order by family, mode"
        ).fetchall()
        environments = [json.loads(e) for (e,) in connection.execute("select environment from runs")]
    assert [cell[:3] for cell in cells] == [
        ("faulty", "none", "ok"), ("flux1", "torch-ffn", "ok"), ("synthetic", "layer", "ok"), ("synthetic", "none", "ok")
    ]  # fmt: skip
    assert cells[0][3].startswith("m2-") and {cell[3] for cell in cells[1:]} == {
        None
    }  # only one's own is fingerprinted
    assert len(environments) == 3
    for facts in environments:
        assert facts["torch_threads"] >= 1 and "cuda" in facts and "cudnn" in facts, facts


def test_the_readmes_layout_names_every_module_of_ckptlib_and_every_folder_of_sweep():
    """README's Layout is the tree as it is: ckptlib's modules and packages, sweep's stage folders
    and top-level modules, each named in it."""
    text = (ROOT / "README.md").read_text()
    layout = text[text.index("## Layout") :]
    layout = layout[: layout.index("\n## ", 1)] if "\n## " in layout[1:] else layout
    named = set(layout.replace("/", " ").replace("`", " ").split())
    ckptlib = [p.stem for p in (ROOT / "ckptlib").iterdir() if p.suffix == ".py" and p.stem != "__init__"]
    ckptlib += [p.name for p in (ROOT / "ckptlib").iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    sweep = [p.name for p in (ROOT / "sweep").iterdir() if p.is_dir() and p.name != "__pycache__"]
    sweep += [p.stem for p in (ROOT / "sweep").iterdir() if p.suffix == ".py" and p.stem != "__init__"]
    missing = sorted(
        {f"ckptlib/{m}" for m in ckptlib if f"{m}.py" not in named and m not in named}
        | {f"sweep/{m}" for m in sweep if f"{m}.py" not in named and m not in named}
    )
    assert not missing, f"README's Layout does not name {missing}"
