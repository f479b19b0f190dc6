"""Published-table import, report round trip, diff, splice and advise."""

import pandas as pd
import pytest

from sweep.machine.cards import parse_size
from sweep.report.advise import advise
from sweep.report.diff import diff_runs, markdown
from sweep.report.matrices import build_matrices
from sweep.report.pages import splice_document, write_reports
from sweep.report.published import BUNDLED, import_file
from sweep.report.text import TableError, parse_tables
from sweep.store.database import open_store
from sweep.store.query import load_cells, select_runs
from tests.support.sweeps import query, run_cli

PUBLISHED = BUNDLED / "unsloth-synthetic.md"


@pytest.fixture
def engine(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    import_file(engine, PUBLISHED)
    return engine


def cells_of(markdown_text: str, source: str) -> dict[tuple, str]:
    """(GPU, Tokens or '', column) -> cell text, for every table of a document."""
    found = {}
    for table in parse_tables(markdown_text, source):
        for _, cells in table.rows:
            row = dict(zip(table.header, cells))
            hardware = row.get("GPU", row.get("Hardware"))  # the docs' heading, and the reports'
            for column, text in row.items():
                if column not in ("GPU", "Hardware", "Tokens"):
                    found[(table.heading if "Tokens" in row else "large", hardware, row.get("Tokens", ""), column)] = (
                        text
                    )
    return found


def test_import_then_report_reproduces_every_published_cell(engine, tmp_path):
    written = write_reports(engine, tmp_path / "reports", with_plots=False)
    report = (tmp_path / "reports" / "synthetic.md").read_text()
    published = {
        (("large" if k[0] == "large" else "packed"), *k[1:]): v
        for k, v in cells_of(PUBLISHED.read_text(), "published").items()
    }
    regenerated = {
        (("large" if k[0] == "large" else "packed"), *k[1:]): v for k, v in cells_of(report, "report").items()
    }
    assert len(published) == 6 * 5 + 2 * 5
    assert regenerated == published
    assert tmp_path / "reports" / "index.md" in written


def test_reimport_replaces_instead_of_duplicating(engine, tmp_path):
    import_file(engine, PUBLISHED)
    assert query(tmp_path / "r.db", "select count(*) from runs") == [(4,)]
    assert query(tmp_path / "r.db", "select count(*) from cells") == [(40,)]
    assert query(tmp_path / "r.db", "select distinct provenance from runs") == [("published",)]


def test_diff_of_the_published_runs(engine):
    result = diff_runs(engine, "H100 80GB", "L40S")
    cells = result.cells.set_index(["preset", "mode"])
    assert len(cells) == 20
    assert cells.loc[("docs-packed-16384", "none"), "ratio"] == pytest.approx(1.8153 / 0.8781)
    assert cells.loc[("docs-large", "unsloth"), "ratio"] == pytest.approx(0.6864 / 0.2722)
    assert result.unit == "GiB" and cells.loc[("docs-packed-1024", "layer"), "memory_diff"] == pytest.approx(
        3.60 - 3.64, abs=1e-9
    )
    published = cells_of(PUBLISHED.read_text(), "p")
    for (heading, gpu, tokens, column), text in published.items():
        if gpu != "H100 80GB":
            continue
        other = published[(heading, "L40S", tokens, column)]
        ratio = float(other.split("s /")[0]) / float(text.split("s /")[0])
        preset = f"docs-packed-{tokens}" if tokens else "docs-large"
        mode = {
            "No checkpoint": "none",
            "Torch FFN": "torch-ffn",
            "Unsloth FFN": "unsloth-ffn",
            "Torch layer": "layer",
            "Unsloth layer": "unsloth",
        }[column]
        assert cells.loc[(preset, mode), "ratio"] == pytest.approx(ratio)
    assert set(result.cells["significance"]) == {"no samples (published or predicted)"}
    assert result.transitions.empty
    assert markdown(result) == markdown(diff_runs(engine, "H100 80GB", "L40S"))  # stable output


def test_a_diff_plot_names_each_bar_as_the_table_names_its_cell(engine, tmp_path, monkeypatch):
    """Bars of several families, presets and precisions each carry the cell's whole name."""
    from matplotlib.axes import Axes

    from sweep.report.plots import diff_plot

    result = diff_runs(engine, "H100 80GB", "L40S")
    cells = pd.concat([result.cells.head(2), result.cells.head(1).assign(family="flux1", quantization="int8-torchao")])
    drawn = []
    barh = Axes.barh
    monkeypatch.setattr(
        Axes, "barh", lambda ax, labels, *a, **k: drawn.append(list(labels)) or barh(ax, labels, *a, **k)
    )
    assert diff_plot(cells, "H100 80GB", "L40S", tmp_path / "diff.png").exists()
    first = cells.iloc[0]
    assert drawn[0][0] == f"synthetic {first.preset} {int(first.tokens)} tokens {first['mode']}"
    assert drawn[0][2].startswith("flux1 ") and drawn[0][2].endswith(" int8-torchao")


def test_a_diff_plot_of_many_cells_draws_those_that_changed_most_in_the_tables_order(engine, tmp_path, monkeypatch):
    """The H100-vs-L40S diff of the docs' tables has hundreds of cells (a bar each was a 7271 px tall
    figure): past DIFF_BARS, the cells whose time or memory ratio is furthest from 1, in table order,
    and the title says how many of how many."""
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from sweep.report.plots import DIFF_BARS, diff_plot

    base = diff_runs(engine, "H100 80GB", "L40S").cells.head(1)
    ratios = [1.0 + (i % 7) / 100 for i in range(DIFF_BARS + 10)]
    ratios[3], ratios[49] = 3.0, 0.2  # the two that changed most, whatever else is drawn
    cells = pd.concat([base.assign(preset=f"p{i}", ratio=r, memory_ratio=1.0) for i, r in enumerate(ratios)])
    drawn, titles = [], []
    barh, suptitle = Axes.barh, Figure.suptitle
    monkeypatch.setattr(
        Axes, "barh", lambda ax, labels, *a, **k: drawn.append(list(labels)) or barh(ax, labels, *a, **k)
    )
    monkeypatch.setattr(Figure, "suptitle", lambda fig, t, *a, **k: titles.append(t) or suptitle(fig, t, *a, **k))
    assert diff_plot(cells, "H100 80GB", "L40S", tmp_path / "diff.png").exists()
    presets = [label.split()[1] for label in drawn[0]]
    assert len(presets) == DIFF_BARS and "p3" in presets and "p49" in presets
    assert presets == sorted(presets, key=lambda name: int(name[1:]))  # the table's order
    assert titles == [f"L40S vs H100 80GB, the {DIFF_BARS} of {DIFF_BARS + 10} cells that changed most"]


def test_a_run_on_one_side_only_is_one_line_and_the_table_fits_a_terminal(engine):
    """Diffing by hardware pairs cells within runs of the same name: a sweep the other side never
    ran is one line, not a row per cell; the terminal table keeps each cell on one 160-column line."""
    from rich.console import Console

    from sweep.config.cell import Cell
    from sweep.report.diff import rich_table
    from sweep.store import database as store
    from sweep.store.results import CellResult

    extra = store.get_or_create_run(engine, "extra", "H100 80GB")
    cell = Cell("synthetic", "ckptlib.synthetic.build", "docs-packed-4096", "layer", "torch")
    store.record_cell(engine, extra, cell.as_dict(), cell.key, CellResult("ok", sec_per_step=1.0, peak_bytes=2**30))
    result = diff_runs(engine, "H100 80GB", "L40S")
    assert len(result.cells) == 20 and result.transitions.empty
    assert result.unpaired == ["only on H100 80GB: run 'extra' (1 cells)"]
    assert "## Runs on one side only (not compared)\n\n- only on H100 80GB: run 'extra' (1 cells)" in markdown(result)
    console = Console(width=160, record=True)
    console.print(rich_table(result))
    rows = [line for line in console.export_text().splitlines() if line.startswith("│")]
    assert len(rows) == 20 and all(len(line) <= 160 for line in rows), "\n".join(rows)


def test_status_transitions_come_first(engine, tmp_path):
    changed = PUBLISHED.read_text().replace("| L40S | 16384 | 1.8153s / 19.35 GiB |", "| L40S | 16384 | OOM |")
    changed = changed.replace("| 2.4218s / 5.36 GiB |", "| not run |")
    source = tmp_path / "l40s-tight.md"
    source.write_text(changed.replace("L40S", "L40S tight"))
    import_file(engine, source)
    result = diff_runs(engine, "H100 80GB", "L40S tight")
    transitions = result.transitions
    assert list(transitions["transition"][:2]) == [
        "fits on H100 80GB, OOM on L40S tight",
        "H100 80GB: ok, L40S tight: not run",
    ]
    assert result.cells.index[: len(transitions)].tolist() == list(range(len(transitions)))
    text = markdown(result)
    assert "- synthetic docs-packed-16384 none none: fits on H100 80GB, OOM on L40S tight" in text


def test_measured_samples_are_judged_with_mann_whitney(tmp_path):
    from sweep.store import database as store
    from sweep.store.results import CellResult

    engine = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    cell = {"family": "f", "preset": "p", "mode": "none", "quantization": "none", "training": "lora"}

    def run(name, seconds):
        samples = [(s, False) for s in seconds]
        result = CellResult("ok", sec_per_step=sorted(seconds)[len(seconds) // 2], peak_bytes=2**30, samples=samples)
        return {"name": "s", "hardware": name, "provenance": "measured", "cells": [(cell, "k", result, {"tokens": 16})]}

    store.replace_runs(
        engine,
        [
            run("A", [1.0, 1.01, 0.99, 1.0, 1.02, 0.98]),
            run("B", [1.5, 1.49, 1.52, 1.51, 1.5, 1.48]),
            run("C", [1.0, 1.02, 0.99, 1.01, 0.98, 1.0]),
        ],
    )
    assert diff_runs(engine, "A", "B").cells["significance"][0].startswith("slower (p=")
    assert diff_runs(engine, "A", "C").cells["significance"][0].startswith("not significant")


def test_splice_replaces_marked_blocks_only_and_is_idempotent(engine, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n\nProse before.\n\n<!-- sweep-matrix:start:synthetic/packed-latents -->\nold table\n"
        "<!-- sweep-matrix:end:synthetic/packed-latents -->\n\nProse between | with a pipe.\n\n"
        "<!-- sweep-matrix:start:synthetic/large-shape -->\n<!-- sweep-matrix:end:synthetic/large-shape -->\n"
        "\n<!-- sweep-matrix:start:unknown/table -->\nkept\n<!-- sweep-matrix:end:unknown/table -->\nEnd.\n"
    )
    replaced = splice_document(engine, doc)
    assert replaced == ["synthetic/packed-latents", "synthetic/large-shape"]
    text = doc.read_text()
    assert text.startswith("# Title\n\nProse before.\n\n") and "Prose between | with a pipe." in text
    assert "old table" not in text and "kept" in text and text.endswith("End.\n")
    assert "| H100 80GB  | 16384    | 0.8781s / 19.39 GiB" in text
    assert "| L40S       | 0.5045s / 14.51 GiB" in text
    splice_document(engine, doc)
    assert doc.read_text() == text


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda t: t.replace("| H100 80GB | 4096 | 0.0948s / 7.43 GiB |", "| H100 80GB | 4096 |"),
            ":12: row has 6 cells, the header has 7",
        ),
        (
            lambda t: t.replace(
                "| Torch FFN | Unsloth FFN | Torch layer | Unsloth layer |\n|---|---|---|---|---|---|---|",
                "| Torch FFN | Unsloth FFN | Torch layer | Warp drive |\n|---|---|---|---|---|---|---|",
            ),
            ":9: unknown column 'Warp drive'",
        ),
        (
            lambda t: t.replace("0.5932s / 10.88 GiB", "fast-ish"),
            ":25: column 'Unsloth FFN': cannot parse cell 'fast-ish'",
        ),
        (lambda t: t.replace("| L40S | 16384 |", "| L40S | many |"), ":16: Tokens cell 'many' is not a whole number"),
    ],
)
def test_malformed_imports_name_file_line_and_cell_and_change_nothing(engine, tmp_path, edit, message):
    bad = tmp_path / "bad.md"
    original = PUBLISHED.read_text()
    edited = edit(original)
    assert edited != original
    bad.write_text(edited.replace("H100 80GB", "H200"))
    before = query(tmp_path / "r.db", "select * from cells order by id")
    with pytest.raises(TableError) as error:
        import_file(engine, bad)
    assert str(error.value).startswith(str(bad)) and message in str(error.value)
    assert query(tmp_path / "r.db", "select * from cells order by id") == before
    assert query(tmp_path / "r.db", "select count(*) from runs where hardware = 'H200'") == [(0,)]


def test_import_cli_reports_errors_and_success(tmp_path):
    db = f"sqlite:///{tmp_path / 'c.db'}"
    ok = run_cli(["import", str(PUBLISHED), "--db", db])
    assert ok.returncode == 0 and "imported 4 published run(s)" in ok.stdout
    missing = run_cli(["import", str(tmp_path / "nope.md"), "--db", db])
    assert missing.returncode != 0 and "nothing imported: cannot read" in missing.stderr
    bad_url = run_cli(["report", "--db", "postgresql+nodriver://x/y"])
    assert bad_url.returncode != 0 and "cannot use database URL" in bad_url.stderr


HAND_CHECKED = pd.DataFrame(
    [
        # mode, status, sec/step, peak GiB
        ("none", "ok", 1.00, 30.0),
        ("torch-ffn", "ok", 1.05, 22.0),
        ("unsloth-ffn", "ok", 1.12, 20.0),
        ("layer", "ok", 1.30, 12.0),
        ("unsloth", "ok", 1.36, 10.5),
        ("interval2", "oom", None, None),
    ],
    columns=["mode", "status", "sec_per_step", "gib"],
).assign(
    family="toy",
    preset="p",
    tokens=4096,
    quantization="none",
    hardware="GPU X",
    provenance="measured",
    config=None,
    peak_bytes=lambda f: (f["gib"] * 2**30).round(),
    iqr_s=None,
    predicted_bytes=None,
    host_load=None,
    kind="cuda",
)


@pytest.mark.parametrize(
    "vram, expected",
    [
        ("40GiB", "none"),  # fits: leave checkpointing off
        # each peak counts with the 0.5 GiB CUDA context
        ("24GiB", "unsloth-ffn"),  # budget 21.6: torch-ffn (22 + 0.5) is over, unsloth-ffn (20 + 0.5) fits
        ("25GiB", "torch-ffn"),  # budget 22.5
        ("14GiB", "layer"),  # budget 12.6
        ("12.5GiB", "unsloth"),  # budget 11.25: unsloth (10.5 + 0.5) fits; at 12 GiB (10.8) it would not
        ("10GiB", None),  # nothing fits
    ],
)
def test_advise_applies_the_docs_rule(vram, expected):
    advice = advise(HAND_CHECKED, "toy", parse_size(vram))
    assert advice.mode == expected
    if expected is None:
        assert "nothing recorded fits" in str(advice) and (
            "closest: unsloth: 10.50 GiB + 512.00 MiB context = 11.00 GiB, 2.00 GiB over the budget" in str(advice)
        )
        assert "a quantized base (int8-torchao, fp8-torchao, int8-sdnq, int8-sdnq-hadamard)" in str(advice)
        assert "predict them (ckpt-sweep run sweep=none family=toy preset=p quantization=int8-torchao" in str(advice)
    else:
        assert f"use: {expected}" in str(advice)
    assert "interval2" in str(advice)  # the OOM cell is listed as not completed


def test_when_nothing_fits_advise_says_what_fits_with_a_quantized_base():
    int8 = HAND_CHECKED.assign(quantization="int8-torchao", peak_bytes=HAND_CHECKED["peak_bytes"] - 5 * 2**30)
    fp8 = HAND_CHECKED.assign(
        quantization="fp8-torchao", provenance="predicted", peak_bytes=HAND_CHECKED["peak_bytes"] - 2**30
    )
    lines = str(advise(pd.concat([HAND_CHECKED, int8, fp8]), "toy", parse_size("10GiB"))).splitlines()
    at = lines.index("nothing fits at this precision; with another base precision:")
    assert lines[at + 1].startswith("  fp8-torchao: unsloth does not fit either at 9.50 GiB (predicted);")
    assert lines[at + 2] == (
        "  int8-torchao: unsloth fits at 5.50 GiB (measured); "
        "ckpt-sweep advise --family toy --preset p --quantization int8-torchao ... answers in full"
    )


def test_advise_rejects_unknown_input():
    with pytest.raises(ValueError, match="cannot read memory size 'lots'"):
        parse_size("lots")
    with pytest.raises(ValueError, match="no recorded cells for family 'other'") as refused:
        advise(HAND_CHECKED, "other", parse_size("48GiB"), quantization="int8-torchao")
    # and how to get some: the commands, whole
    assert "(ckpt-sweep run sweep=none family=other quantization=int8-torchao mode=none,torch-ffn," in str(
        refused.value
    )
    assert "predict=true)" in str(refused.value)
    assert "(ckpt-sweep plan --family other --card ... --quantization int8-torchao)" in str(refused.value)
    assert parse_size("24GB") == parse_size("24G") == parse_size("24GiB") == parse_size("24") == 24 * 2**30
    assert parse_size("512MiB") == 512 * 2**20


@pytest.mark.parametrize(
    "args, message",
    [
        (["--vram", "0"], "a card needs some memory: got '0'"),
        (
            ["--vram", "24", "--margin", "1.5"],
            "--margin is a share of the card to keep free, from 0 to under 1; got 1.5",
        ),
        (
            ["--vram", "24", "--margin", "-0.5"],
            "--margin is a share of the card to keep free, from 0 to under 1; got -0.5",
        ),
        (["--card", "TPU v5"], "unknown card 'TPU v5'; known: RTX 3090"),
        (["--card", "A100"], "card 'A100' names A100 40GB and A100 80GB: say which (or give --vram)"),
    ],
)
def test_advise_refuses_bad_cards_and_margins(engine, tmp_path, args, message):
    done = run_cli(
        ["advise", "--family", "synthetic", "--tokens", "16384", "--db", f"sqlite:///{tmp_path / 'r.db'}", *args]
    )
    assert done.returncode != 0 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_advise_takes_a_card_by_name_and_never_ranks_activation_offload_above_layer():
    from sweep.machine.cards import card_bytes

    assert card_bytes("h100 80gb") == 81559 * 2**20 and card_bytes("RTX 4090") == 24564 * 2**20
    assert card_bytes("H100") == card_bytes("H100 80GB") and card_bytes("4090") == card_bytes("RTX 4090")
    # Predictions only: activation-offload predicts what layer does (its attention offload is skipped).
    cells = (
        pd.DataFrame(
            [(m, "ok", None, 12.0) for m in ("none", "activation-offload", "layer", "unsloth")]
            + [("none", "ok", None, 30.0)],
            columns=["mode", "status", "sec_per_step", "gib"],
        )
        .iloc[1:4]
        .assign(
            family="toy",
            preset="p",
            tokens=4096,
            quantization="none",
            hardware="predicted: cuda",
            provenance="predicted",
            device="predicted:cuda",
            config=None,
            peak_bytes=lambda f: (f["gib"] * 2**30).round(),
            text=lambda f: f["mode"],
        )
    )
    advice = advise(cells, "toy", parse_size("24GiB"))
    assert advice.mode == "layer", str(advice)


def test_report_selects_runs_by_hardware(engine):
    with pytest.raises(ValueError, match="no run with id or hardware 'TPU'"):
        select_runs(engine, ["TPU"])
    matrices = build_matrices(load_cells(engine, select_runs(engine, ["L40S"])))
    assert {m.table_id for m in matrices} == {"synthetic/packed-latents", "synthetic/large-shape"}
    assert all(set(m.frame["Hardware"]) == {"L40S"} for m in matrices)


def test_near_duplicate_cells_each_get_their_own_column(tmp_path):
    """Cells that differ only in interval, stride, training, LoRA rank, dtype or a shape override all
    show, under headings that name the difference; nothing is overwritten by the last one."""
    from sweep.config.cell import Cell
    from sweep.store import database as store
    from sweep.store.results import CellResult

    engine = open_store(f"sqlite:///{tmp_path / 'dup.db'}")
    run_id = store.get_or_create_run(engine, "dups", "CPU: x")
    base = dict(family="synthetic", builder="ckptlib.synthetic.build", preset="cpu-256", mode="layer", backend="torch")
    variants = {
        "plain": {},
        "interval 3": {"interval": 3},
        "interval 2, stride 4": {"interval": 2, "stride": 4},
        "full": {"training": "full"},
        "LoRA rank 8": {"lora_rank": 8},
        "fp32": {"dtype": "fp32"},
        "depth 4": {"shape": {"depth": 4}},
    }
    for i, settings in enumerate(variants.values()):
        cell = Cell(**{**base, **settings})
        store.record_cell(
            engine,
            run_id,
            cell.as_dict(),
            cell.key,
            CellResult("ok", sec_per_step=1.0 + i / 100, peak_bytes=(i + 1) * 2**30),
            shape={"tokens": 256},
        )
    unsupported = Cell(**{**base, "mode": "torch-ffn", "backend": "torch-ffn"})
    store.record_cell(
        engine,
        run_id,
        unsupported.as_dict(),
        unsupported.key,
        CellResult("unsupported", "synthetic: no feed-forward boundary (injected)"),
        shape={"tokens": 256},
    )
    [matrix] = build_matrices(load_cells(engine, select_runs(engine)))
    text = matrix.markdown()
    for i in range(len(variants)):
        assert f"{1.0 + i / 100:.4f}s / {i + 1}.00 GiB" in text, text
    headings = [c for c in matrix.frame.columns if c.startswith("Torch layer")]
    # the dtype is the row (precision bf16 vs fp32); every other difference is a column heading
    assert len(headings) == len(variants) - 1 and "Torch layer (interval 3)" in headings
    assert list(matrix.frame["Precision"]) == ["bf16", "fp32"]
    assert "Torch layer (interval 2, stride 4)" in headings and any("LoRA rank 8" in h for h in headings)
    assert "unsupported [1]" in text and "[1] synthetic: no feed-forward boundary (injected)" in text
    engine.dispose()


def test_an_imported_oom_cell_is_a_status_in_report_advise_and_diff(engine, tmp_path):
    source = tmp_path / "oom.md"
    source.write_text(PUBLISHED.read_text().replace("| L40S | 16384 | 1.8153s / 19.35 GiB |", "| L40S | 16384 | OOM |"))
    import_file(engine, source)
    written = write_reports(engine, tmp_path / "reports", with_plots=False)
    assert "| L40S       | 16384    | OOM " in (tmp_path / "reports" / "synthetic.md").read_text()
    advice = advise(
        load_cells(engine, select_runs(engine)), "synthetic", parse_size("48GiB"), hardware="L40S", tokens=16384
    )
    assert "none" in str(advice) and "OOM" in str(advice)
    result = diff_runs(engine, "H100 80GB", "L40S")
    assert "fits on H100 80GB, OOM on L40S" in set(result.transitions["transition"])
    assert written


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not UTF-8 text (byte 0x89 at offset 0)"),
        (b"| GPU |\n|---|\n\x00\x00", "a binary file (NUL bytes)"),
    ],
)
def test_import_of_a_binary_file_is_one_line(tmp_path, content, message):
    bad = tmp_path / "table.md"
    bad.write_bytes(content)
    done = run_cli(["import", str(bad), "--db", f"sqlite:///{tmp_path / 'i.db'}"])
    assert done.returncode != 0 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_tokens_print_as_whole_numbers(engine, tmp_path):
    write_reports(engine, tmp_path / "reports", with_plots=False)
    text = (tmp_path / "reports" / "synthetic.md").read_text()
    assert "| 16384 " in text and "16384.0" not in text


def test_reports_read_as_a_person_would_and_remove_only_their_own_stale_files(engine, tmp_path):
    """A CPU table of small peaks in MiB with its precision spelled out and a legend (one with no
    figure names no unit); the published tables untouched in GiB; a page that is no longer generated
    removed, a file of your own kept."""
    from sweep.config.cell import Cell
    from sweep.store import database as store
    from sweep.store.results import CellResult

    run_id = store.get_or_create_run(engine, "mine", "CPU: Test", device="cpu")
    for i, mode in enumerate(("none", "layer")):
        cell = Cell(
            family="flux1",
            builder="ckptlib.families.builders.flux1",
            preset="tiny",
            mode=mode,
            backend="none" if mode == "none" else "torch",
        )
        result = CellResult("ok", sec_per_step=0.01 * (i + 1), peak_bytes=(3 - i) * 2**20, host_load=2.0 if i else 0.5)
        store.record_cell(engine, run_id, cell.as_dict(), cell.key, result, shape={"height": 64, "width": 64})
    out = tmp_path / "reports"
    write_reports(engine, out, with_plots=False)
    page = (out / "flux1.md").read_text()
    assert "| Precision   | none               | layer                |" in page
    assert "| fp32        | 0.0100s / 3.00 MiB | 0.0200s / 2.00 MiB ! |" in page
    assert "peak MiB of live tensors on the CPU" in page and "`!` the host was busy" in page
    assert "GiB as the docs published them" in (out / "synthetic.md").read_text()
    unsupported = store.get_or_create_run(engine, "unbuilt", "CPU: Test", device="cpu")
    cell = Cell(family="sd3", builder="ckptlib.families.builders.sd3", preset="tiny", mode="none", backend="none")
    store.record_cell(engine, unsupported, cell.as_dict(), cell.key, CellResult("unsupported", reason="no class"))
    write_reports(engine, out, with_plots=False)
    assert "Each cell: a status (no cell ran to a figure). `[n]` the reason" in (out / "sd3.md").read_text()
    (out / "notes.md").write_text("mine")
    write_reports(engine, out, selectors=["H100 80GB", "L40S"], with_plots=False)
    assert not (out / "flux1.md").exists() and (out / "notes.md").read_text() == "mine"
    assert (out / "synthetic.md").exists()


def test_a_table_with_reordered_columns_imports_the_same_cells(tmp_path):
    """Columns are found by their heading, not their place: mode columns first, the row labels
    last and swapped, the modes in another order."""
    from sweep.report.published import parse_file

    lines = PUBLISHED.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| GPU | Tokens |"))
    table = [[c.strip() for c in line.strip("|").split("|")] for line in lines[header : header + 8]]
    order = [6, 4, 2, 5, 3, 1, 0]  # Unsloth layer .. No checkpoint, then Tokens, then GPU
    moved = ["| " + " | ".join(row[i] for i in order) + " |" for row in table]
    source = tmp_path / "reordered.md"
    source.write_text("\n".join([*lines[:header], *moved, ""]) + "\n")

    def cells(path):
        runs = [r for r in parse_file(path) if r["name"] == "packed-latents"]
        return {(r["hardware"], key, res.sec_per_step, res.peak_bytes) for r in runs for _, key, res, _ in r["cells"]}

    assert cells(source) == cells(PUBLISHED)
    assert len(cells(source)) == 2 * 3 * 5


def test_an_offload_that_moved_nothing_says_why(tmp_path):
    """activation-offload recomputes every block, so apply skips every attention module and nothing
    moves: the report's counters say so, and the table cell carries a footnote with the reason."""
    import ckptlib
    from ckptlib import synthetic
    from sweep.config.cell import Cell
    from sweep.store import database as store
    from sweep.store.results import CellResult

    engine = open_store(f"sqlite:///{tmp_path / 'offload.db'}")
    run_id = store.get_or_create_run(engine, "offload", "CPU: x")
    from dataclasses import replace

    modes = [
        ("layer", ckptlib.MODES["layer"]),
        ("activation-offload", ckptlib.MODES["activation-offload"]),  # inside regions, as SimpleTuner
        ("activation-offload", replace(ckptlib.MODES["activation-offload"], offload_attention_in_regions=False)),
        ("seg2-stride4-offload-plain", ckptlib.MODES["seg2-stride4-offload-plain"]),
    ]
    for i, (mode, config) in enumerate(modes):
        work = synthetic.build("tiny")
        handle = ckptlib.apply(work.model, replace(config, min_offload_bytes=0), work.spec)
        work.step()
        report = handle.report  # of the step, as the harness records it
        cell = Cell(
            family="synthetic",
            builder="ckptlib.synthetic.build",
            preset="tiny",
            mode=mode,
            backend=config.backend,
            interval=config.interval,
            stride=config.stride,
            offload_attention=config.offload_attention,
            offload_attention_in_regions=config.offload_attention_in_regions,
        )
        result = CellResult("ok", sec_per_step=1 + i / 10, peak_bytes=2**20, report=report.as_dict())
        store.record_cell(engine, run_id, cell.as_dict(), cell.key, result, shape={"tokens": 64})
    [matrix] = build_matrices(load_cells(engine, select_runs(engine)))
    text = matrix.markdown()
    row = matrix.frame.iloc[0]
    plain_blocks_only = "activation-offload (attention offload in regions False)"
    assert row[plain_blocks_only].endswith("[1]"), dict(row)
    assert not row["activation-offload"].endswith("]") and not row["seg2-stride4-offload-plain"].endswith("]")
    assert "[1] offloads nothing: all" in text and "the same work as Torch layer" in text
    engine.dispose()


def record(engine, run_id: int, hardware_cells: list[tuple[dict, float]], tokens: int = 256) -> None:
    """Cells of the synthetic cpu-256 preset with the settings given, each with its sec/step."""
    from sweep.config.cell import Cell
    from sweep.store import database as store
    from sweep.store.results import CellResult

    base = dict(family="synthetic", builder="ckptlib.synthetic.build", preset="cpu-256", backend="torch")
    for settings, seconds in hardware_cells:
        cell = Cell(**{**base, **settings})
        result = CellResult("ok", sec_per_step=seconds, peak_bytes=2**30)
        store.record_cell(engine, run_id, cell.as_dict(), cell.key, result, shape={"tokens": tokens})


def test_a_heading_names_what_ran_whatever_data_sits_beside_it(tmp_path):
    """NOTE [ A heading means one thing ]: the bare mode is the eager cell, and stays so when
    compiled cells outnumber it; the title says what every cell shares; a plot point, a progress
    line and the heading use the same words."""
    from sweep.config.cell import Cell
    from sweep.report.matrices import mode_label
    from sweep.store import database as store

    engine = open_store(f"sqlite:///{tmp_path / 'compile.db'}")
    here = store.get_or_create_run(engine, "compile", "CPU: x")
    none, layer = {"mode": "none", "backend": "none"}, {"mode": "layer"}
    record(engine, here, [(none, 1.0), ({**none, "compile": "full"}, 0.5), (layer, 2.0)])

    def table():
        [matrix] = build_matrices(load_cells(engine, select_runs(engine)))
        return matrix, matrix.frame.set_index("Hardware")

    matrix, frame = table()
    assert frame.loc["CPU: x", "No checkpoint"].startswith("1.0000s")
    assert frame.loc["CPU: x", "No checkpoint (compile full)"].startswith("0.5000s")
    assert matrix.title == "synthetic: compile; 256 tokens, bf16, lora, LoRA rank 16"
    there = store.get_or_create_run(engine, "compile", "CPU: y")  # compiled cells now the majority
    record(engine, there, [({**none, "compile": "full"}, 0.25), ({**layer, "compile": "full"}, 0.75)])
    matrix, frame = table()
    assert frame.loc["CPU: x", "No checkpoint"].startswith("1.0000s")  # the same column, the same cell
    assert frame.loc["CPU: y", "No checkpoint"] == "not run"
    assert frame.loc["CPU: y", "Torch layer (compile full)"].startswith("0.7500s")
    full = Cell("synthetic", "ckptlib.synthetic.build", "cpu-256", "none", "none", compile="full")
    assert mode_label("synthetic", "none", full.as_dict()) == "No checkpoint (compile full)"
    assert "none (compile full)" in full.describe()
    engine.dispose()


def test_a_single_token_count_and_shared_settings_are_in_the_title(tmp_path):
    """A published table with one row at 16384 tokens keeps its count; cells that all share a
    compile mode and LoRA rank say so once, in the title, and not in every heading."""
    from sweep.store import database as store

    source = tmp_path / "one-row.md"
    source.write_text(
        "## Packed image latents\n\n| GPU | Tokens | No checkpoint | Torch layer |\n|---|---|---|---|\n"
        "| H100 | 16384 | 1.0000s / 20.00 GiB | 1.3000s / 12.00 GiB |\n"
    )
    engine = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    import_file(engine, source)
    [matrix] = build_matrices(load_cells(engine, select_runs(engine)))
    assert "16384 tokens" in matrix.title, matrix.title
    mine = store.get_or_create_run(engine, "rank64", "CPU: x")
    shared = {"compile": "regional", "lora_rank": 64}
    record(engine, mine, [({"mode": "none", "backend": "none", **shared}, 1.0), ({"mode": "layer", **shared}, 2.0)])
    [matrix] = [m for m in build_matrices(load_cells(engine, select_runs(engine))) if m.sweep == "rank64"]
    assert matrix.title == "synthetic: rank64; 256 tokens, bf16, lora, LoRA rank 64, compile regional"
    assert {"No checkpoint", "Torch layer"} <= set(matrix.frame.columns)
    engine.dispose()


def test_a_figure_is_drawn_again_only_when_what_it_shows_changed(tmp_path, monkeypatch):
    """Regenerating the reports redraws the figures whose data, title or drawing code changed (a
    fingerprint in the PNG), and none of the others: not those whose rows only moved in the frame."""
    from sweep.report import plots

    drawn = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.append(path) or save(fig, path))
    points = pd.DataFrame(
        {"sec": [0.10, 0.12], "peak": [8 * 2**30, 5 * 2**30], "precision": ["bf16", "bf16"], "label": ["none", "layer"]}
    )
    path = tmp_path / "figure.png"
    plots.tradeoff_plot(points, "flux1 dev on H100", path)
    first = path.read_bytes()
    plots.tradeoff_plot(points, "flux1 dev on H100", path)
    assert len(drawn) == 1 and path.read_bytes() == first
    plots.tradeoff_plot(points.assign(sec=[0.10, 0.13]), "flux1 dev on H100", path)
    plots.tradeoff_plot(points, "flux1 dev on L40S", path)
    assert len(drawn) == 3
    monkeypatch.setattr(plots, "_CODE", "edited")
    plots.tradeoff_plot(points, "flux1 dev on L40S", path)
    assert len(drawn) == 4
    # the same rows at other places in the frame they were cut from (an earlier run removed)
    plots.tradeoff_plot(points.set_axis([40, 41]), "flux1 dev on L40S", path)
    assert len(drawn) == 4
    path.write_bytes(b"not a png")  # a file that is not one of ours is drawn over
    plots.tradeoff_plot(points, "flux1 dev on L40S", path)
    assert len(drawn) == 5 and path.read_bytes().startswith(b"\x89PNG")


def test_the_reports_figures_say_their_progress_table_by_table(engine, tmp_path):
    heard = []
    write_reports(engine, tmp_path / "reports", progress=lambda done, total: heard.append((done, total)))
    total = heard[-1][1]
    assert total > 1 and heard == [(done, total) for done in range(1, total + 1)]


def test_a_family_tables_plots_are_its_own_hardwares(tmp_path):
    """SimpleTuner's family tables, imported: Z-Image's H100 table shows the H100 plot and its L40S
    table the L40S one (each table is one hardware's; its plot was drawn under both)."""
    from sweep.report.plots import matrix_plots
    from sweep.report.reproduce_families import family_runs
    from sweep.store.database import replace_runs

    engine = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    replace_runs(engine, family_runs())
    cells = load_cells(engine)
    cells = cells[cells["family"] == "z-image"]
    matrices = build_matrices(cells)
    plots = matrix_plots(cells, matrices, tmp_path / "plots")
    assert sorted(plots) == ["z-image/simpletuner-families/h100-80gb/turbo", "z-image/simpletuner-families/l40s/turbo"]
    for table_id, paths in plots.items():
        hardware = table_id.split("/")[2]
        assert [p.name for p in paths] == [f"z-image-simpletuner-families-{hardware}-turbo-1024-tokens.png"], paths


def test_a_gpu_run_of_the_docs_sweep_lines_up_with_the_docs_columns(engine, tmp_path, monkeypatch):
    """sweep=packed-latents runs the docs' offloader (no prefetch), as the docs' tables record; a
    setting of the offloader is named only where the schedule offloads, so the H200 row falls in the
    docs' five columns instead of ten ('No checkpoint (prefetch False)' said nothing)."""
    from sweep.config.cell import Cell, differing
    from sweep.store import database as store
    from sweep.store.results import CellResult

    run = store.get_or_create_run(engine, "packed-latents", "H200")
    for mode, backend in (("none", "none"), ("layer", "torch"), ("unsloth", "unsloth")):
        cell = Cell(
            "synthetic", "ckptlib.synthetic.build", "docs-packed-4096", mode, backend, training="frozen",
            offload_prefetch=False,
        )  # fmt: skip
        result = CellResult("ok", sec_per_step=0.07, peak_bytes=2**33)
        store.record_cell(engine, run, cell.as_dict(), cell.key, result, shape={"tokens": 4096})
    write_reports(engine, tmp_path / "reports", with_plots=False)
    report = (tmp_path / "reports" / "synthetic.md").read_text()
    [table] = [t for t in parse_tables(report, "report") if "packed-latents" in (t.heading or "")]
    assert table.header == [
        "Hardware",
        "Tokens",
        "No checkpoint",
        "Torch FFN",
        "Unsloth FFN",
        "Torch layer",
        "Unsloth layer",
    ]
    assert "prefetch False" in table.heading  # shared by every cell: said once, in the title
    h200 = [dict(zip(table.header, cells)) for _, cells in table.rows if cells[0] == "H200"]
    assert [(row["Tokens"], row["No checkpoint"], row["Unsloth layer"]) for row in h200] == [
        ("4096", "0.0700s / 8.00 GiB", "0.0700s / 8.00 GiB")
    ]
    assert differing({"backend": "torch", "offload_prefetch": False}, "layer") == []
    assert differing({"backend": "unsloth", "offload_prefetch": False}, "unsloth") == ["offload_prefetch"]
    assert differing({"offload_prefetch": False}, "unsloth") == ["offload_prefetch"]  # published: the mode says

    from sweep.report import plots

    drawn = {}
    monkeypatch.setattr(plots, "tradeoff_plot", lambda points, title, path: drawn.update({title: set(points["label"])}))
    cells = load_cells(engine)
    plots.matrix_plots(cells, build_matrices(cells), tmp_path / "plots")
    [(title, labels)] = [(t, labels) for t, labels in drawn.items() if "on H200" in t]
    assert title.endswith("prefetch False") and labels == {"No checkpoint", "Torch layer", "Unsloth layer"}


def test_a_published_interval_column_is_headed_by_its_mode_where_the_family_wires_it_per_block():
    """The docs' Chroma interval2 column is SimpleTuner's one-block-in-N interval: imported with the
    regions its family wires (sweep/report/reproduce_families.py), it is headed `interval2`, as a
    measured cell of that mode is; where a family groups segments, single blocks are named."""
    from sweep.config.cell import differing

    assert differing({"family": "chroma", "regions": "blocks"}, "interval2") == []  # published: no backend
    assert differing({"family": "chroma", "backend": "torch", "interval": 2, "regions": "blocks"}, "interval2") == []
    assert differing({"family": "flux1", "regions": "blocks"}, "interval2") == ["regions"]
