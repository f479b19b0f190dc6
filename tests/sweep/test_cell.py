"""A cell's fields are declared once (sweep/config/cell.py): the typed sweep config agrees with them,
and every cell key recorded in the shipped database is what its config gives today (existing
databases resume)."""

import json
import sqlite3
from dataclasses import MISSING, fields, is_dataclass
from typing import get_type_hints

import pytest

from sweep.config.cell import FIELDS, LATER_FIELDS, RESOLVED, Cell, cell_from_config, default, setting_label
from sweep.config.structured import SweepConfig
from tests.support.sweeps import ROOT


def schema_default(path: str):
    """The typed config's default at a dotted key: through the group's own config class (mode,
    quantization) where the sweep config leaves the group to be chosen."""
    schema = SweepConfig
    for part in path.split("."):
        declared = {f.name: f for f in fields(schema)}[part]
        hint = get_type_hints(schema)[part]
        if is_dataclass(hint):
            schema = hint
            continue
        value = declared.default_factory() if declared.default_factory is not MISSING else declared.default
        return getattr(value, "name", value)


@pytest.mark.parametrize("name", list(FIELDS))
def test_the_typed_config_holds_every_cell_field_with_its_default(name):
    path = FIELDS[name].metadata["config"]
    if default(name) is MISSING:  # given by the family, the mode or the preset's resolver
        assert path.split(".")[0] in {f.name for f in fields(SweepConfig)}
    elif name in RESOLVED:  # None: resolved from the cell's other values
        assert schema_default(path) is None
    else:
        assert schema_default(path) == default(name)


def test_a_cell_read_from_a_composed_config_has_every_field(tmp_path):
    from hydra import compose, initialize_config_dir

    from sweep.config.structured import register
    from sweep.run.app import CONFIG_PATH

    register()
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base=None):
        cfg = compose("config", overrides=["sweep=none", "mode=seg2-stride4", "+shape.tokens=512", "compile=regional"])
    cell = cell_from_config(cfg)
    assert (cell.backend, cell.interval, cell.stride, cell.compile, cell.shape) == (
        "torch",
        2,
        4,
        "regional",
        {"tokens": 512},
    )
    assert cell.as_dict().keys() == FIELDS.keys()


def test_every_recorded_cell_key_is_what_its_config_gives_today():
    """Fields added later are left out of the key at their default: the shipped database's cells,
    recorded over several rounds, all keep their keys."""
    with sqlite3.connect(ROOT / "results.db") as db:
        rows = db.execute(
            "select c.cell_key, c.config from cells c join runs r on r.id = c.run_id where r.provenance != 'published'"
        ).fetchall()
    assert len(rows) > 500
    for key, config in rows:
        values = {k: tuple(v) if k == "blocks" and isinstance(v, list) else v for k, v in json.loads(config).items()}
        assert Cell(**values).key == key, values
    assert set(LATER_FIELDS) == {
        "blocks",
        "dtype",
        "attention",
        "compile",
        "offload_stash_depth",
        "offload_prefetch",
        "regions",
        "offload_attention_in_regions",
        "ffn_scope",
        "attention_offload_scope",
    }


def composed(*overrides: str) -> Cell:
    from hydra import compose, initialize_config_dir

    from sweep.config.structured import register
    from sweep.run.app import CONFIG_PATH

    register()
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base=None):
        return cell_from_config(compose("config", overrides=["sweep=none", *overrides]))


def test_a_docs_interval_column_means_what_simpletuner_ran_for_the_family_under_a_key_of_its_own():
    """Chroma's SimpleTuner model checkpoints every second block alone under interval 2; Flux.1's
    groups blocks in pairs. The cell says which; the project's pairs on Chroma are a setting of their
    own (named in its label), and a cell recorded before the setting existed keeps its key."""
    chroma = composed("family=chroma", "mode=interval2")
    pairs = composed("family=chroma", "mode=interval2", "mode.regions=segments")
    flux = composed("family=flux1", "mode=interval2")
    assert (chroma.regions, pairs.regions, flux.regions) == ("blocks", "segments", "segments")
    assert composed("family=chroma", "mode=layer").regions == "segments"  # no interval, nothing to group
    assert chroma.key != pairs.key
    before = {k: v for k, v in pairs.as_dict().items() if k != "regions"}  # as recorded before it existed
    assert Cell(**before).key == pairs.key
    assert chroma.checkpoint_config().regions == "blocks"
    assert "interval as" not in chroma.describe() and "(interval as segments)" in pairs.describe()


def test_an_interval_under_wans_ffn_backend_checkpoints_every_block_as_simpletuner_does():
    """SimpleTuner's Wan turns its segments off under -ffn and checkpoints every block's MLP: a cell
    of that mode with an interval runs so, and a label names the project's grouping if asked for."""
    wan = composed("family=wan", "preset=tiny", "mode=torch-ffn", "mode.interval=2")
    grouped = composed("family=wan", "preset=tiny", "mode=torch-ffn", "mode.interval=2", "mode.regions=segments")
    assert (wan.regions, grouped.regions, wan.checkpoint_config().regions) == ("each", "segments", "each")
    assert wan.key != grouped.key
    assert wan.describe().split(" q=")[0].endswith("torch-ffn (interval 2)")
    assert "(interval 2, interval as segments)" in grouped.describe()
    each = Cell(**{**grouped.as_dict(), "regions": "each", "family": "mine"})  # a model of one's own groups
    assert "(interval 2, interval as every block)" in each.describe()
    assert setting_label("blocks", [0, 5]) == "blocks 0, 5"  # as a recorded cell holds them: a list


def test_a_docs_ffn_column_recomputes_what_simpletuner_recomputes_for_the_family_under_a_key_of_its_own():
    """SimpleTuner's Flux.1 checkpoints each block's feed-forward side (norm, modulation, MLP, gate
    and residual; the single blocks' MLP path); its Wan, the MLP module alone. A docs -ffn cell says
    which; Flux.1's cells of the modules alone (what torch-ffn recomputed before) keep their key."""
    flux = composed("family=flux1", "mode=torch-ffn")
    modules = composed("family=flux1", "mode=torch-ffn", "mode.ffn_scope=modules")
    wan = composed("family=wan", "preset=tiny", "mode=unsloth-ffn")
    assert (flux.ffn_scope, modules.ffn_scope, wan.ffn_scope) == ("side", "modules", "modules")
    assert composed("family=flux1", "mode=layer").ffn_scope == "modules"  # no FFN-only backend
    assert flux.key != modules.key
    before = {k: v for k, v in modules.as_dict().items() if k != "ffn_scope"}  # as recorded before it existed
    assert Cell(**before).key == modules.key
    assert flux.checkpoint_config().ffn_scope == "side"
    assert "FFN scope" not in flux.describe() and "(FFN scope modules)" in modules.describe()
    # SimpleTuner's Kandinsky 5 offloads the attention kernel's saved tensors alone
    kandinsky = composed("family=kandinsky5", "preset=tiny", "mode=activation-offload")
    assert (
        kandinsky.attention_offload_scope,
        composed("family=flux1", "mode=activation-offload").attention_offload_scope,
    ) == ("kernel", "module")
    assert composed("family=kandinsky5", "preset=tiny", "mode=layer").attention_offload_scope == "module"


def test_a_progress_line_tells_cells_apart_by_every_setting_that_differs():
    """Progress lines and the sweep's summary name a cell by Cell.describe: cells that differ only
    in compile mode, attention kernel, LoRA rank or a checkpointing setting read differently."""
    base = dict(family="synthetic", builder="ckptlib.synthetic.build", preset="tiny", mode="layer", backend="torch")
    lines = {
        Cell(**base).describe(),
        Cell(**base, compile="regional").describe(),
        Cell(**base, attention="math").describe(),
        Cell(**base, lora_rank=64).describe(),
        Cell(**base, interval=3).describe(),
    }
    assert lines == {
        "synthetic/tiny layer q=none lora",
        "synthetic/tiny layer (compile regional) q=none lora",
        "synthetic/tiny layer (math attention) q=none lora",
        "synthetic/tiny layer (LoRA rank 64) q=none lora",
        "synthetic/tiny layer (interval 3) q=none lora",
    }
