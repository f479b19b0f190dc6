"""`ckpt-sweep VERB ...`: run (the Hydra multirun), report, import, runs, export, merge, rm, diff, advise,
plan, new-family."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sweep.machine.cards import DEFAULT_MARGIN

DEFAULT_DB = "sqlite:///results.db"
USAGE = """usage: ckpt-sweep VERB [ARGS]

verbs:
  run [HYDRA OVERRIDES]      run a sweep (always a multirun), e.g.
                             ckpt-sweep run sweep=packed-latents mode=none,layer,unsloth
  report [--splice DOC.md]   regenerate the matrices under reports/ (or refresh marked blocks of DOC.md)
  import FILE.md | --docs    import published tables as 'published' (--docs: the docs' and SimpleTuner's, shipped)
  runs                       the recorded runs: id, name, hardware, provenance, cells, date
  export [--format csv|json] the cells of some or all runs, with their run, for other tools
  merge SOURCE [--runs ID..] copy runs recorded elsewhere (a GPU pod's results.db) into this database
  rm ID [ID ...] [--yes]     delete runs with their cells (a trial run, one recorded under an old meaning)
  diff A B [--fail-on ...]   two runs (id or hardware label) cell by cell; --fail-on gates a CI job
  advise --family F --vram 48GiB [--hardware H] [--tokens N | --preset P]
                             which mode to use on that card
  plan --family F --vram 24GB [--preset P] [--verify]
                             the fastest schedule that fits, predicted (and measured with --verify)
  new-family NAME            write NAME.py here: a complete builder for your own model, to edit

`ckpt-sweep VERB --help` describes a verb's options; `ckpt-sweep --version` prints the version.
"""


def run(args: list[str]) -> None:
    from sweep.run.heap import collector_paused

    with collector_paused():  # NOTE [ Imports without the collector ] in sweep/run/heap.py
        from sweep.config.structured import name_problem
        from sweep.run import progress
        from sweep.run.app import hydra_app, start_sweep  # registers the typed configs name_problem reads
        from sweep.run.interruption import handled

    if problem := name_problem(args):
        sys.exit(f"ckpt-sweep: {problem}")
    alone = ("-m", "--multirun", "--cfg", "-c", "--help", "-h", "--info", "-i", "-sc", "--shell-completion")
    if not any(a in alone for a in args):
        args = ["--multirun", *args]
    sys.argv = ["ckpt-sweep run", *args]
    progress.render_run = run_matrix  # the end of the sweep shows each run as the docs' matrix
    start_sweep()
    with handled():
        hydra_app()


def run_matrix(engine, run_id: int) -> str:
    """One run as the docs' matrix; its modules (pandas among them) are imported only by a sweep
    that ends, not by one refused at its start."""
    from sweep.report.pages import run_matrix as matrix

    return matrix(engine, run_id)


def _parser(verb: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"ckpt-sweep {verb}", description=description)
    parser.add_argument(
        "--db", default=DEFAULT_DB, help=f"SQLAlchemy database URL or a SQLite file's path (default {DEFAULT_DB})"
    )
    return parser


def _engine(url: str, create: bool = False):
    """The database a verb reads (or, for import, writes); a one-line exit when it cannot be used.
    A read verb never creates a database: a mistyped path is an error, not an empty report."""
    from sweep.store.database import StoreError, open_store

    try:
        return open_store(url, create=create)
    except StoreError as error:
        sys.exit(f"ckpt-sweep: {error}")


def report(args: list[str]) -> None:
    parser = _parser("report", "Regenerate the docs' matrices from the database.")
    parser.add_argument("--out", default="reports", help="output folder (default reports/)")
    parser.add_argument(
        "--runs", nargs="*", help="run ids or hardware labels (default: latest run per sweep and hardware)"
    )
    parser.add_argument("--splice", type=Path, help="refresh the marked blocks of this markdown file instead")
    parser.add_argument("--no-plots", action="store_true")
    options = parser.parse_args(args)
    from sweep.report.pages import splice_document, write_reports

    engine = _engine(options.db)
    try:
        if options.splice:
            if not options.splice.is_file():
                sys.exit(f"ckpt-sweep: {options.splice} is not a file")
            replaced = splice_document(engine, options.splice, options.runs)
            print(f"{options.splice}: replaced {len(replaced)} block(s): {', '.join(replaced) or '(none matched)'}")
            return
        progress = _figures_progress if sys.stderr.isatty() else None
        for path in write_reports(engine, Path(options.out), options.runs, not options.no_plots, progress):
            print(path)
    except ValueError as error:
        sys.exit(f"ckpt-sweep: {error}")


def _figures_progress(done: int, total: int) -> None:
    """On a terminal, one line rewritten in place: the table whose figures are drawn."""
    end = "\n" if done == total else ""
    print(f"\r  figures of table {done}/{total} (unchanged ones are kept)", end=end, file=sys.stderr, flush=True)


def import_tables(args: list[str]) -> None:
    parser = _parser("import", "Import the docs' published result tables (provenance 'published').")
    parser.add_argument("file", type=Path, nargs="?", help="a markdown file of tables (or --docs)")
    parser.add_argument("--docs", action="store_true", help="the docs' published tables, shipped with ckpt-sweep")
    parser.add_argument("--hardware", help="GPU label for tables without a GPU column")
    parser.add_argument("--source", help="where the numbers come from (default: the file path)")
    parser.add_argument("--family", help="family of tables the importer does not know by heading")
    options = parser.parse_args(args)
    from sweep.report.published import DOCS_TABLES, parse_file
    from sweep.report.text import TableError
    from sweep.store.database import replace_runs

    if (options.file is None) == (not options.docs):
        parser.error("give one of FILE.md and --docs")
    files = list(DOCS_TABLES) if options.docs else [options.file]
    engine = _engine(options.db, create=True)
    try:
        runs = [r for f in files for r in parse_file(f, options.hardware, options.source, options.family)]
        if options.docs:
            from sweep.report.reproduce_families import family_runs

            runs += family_runs()
    except TableError as error:
        sys.exit(f"ckpt-sweep: nothing imported: {error}")
    run_ids = replace_runs(engine, runs)  # one transaction: a bad table changes nothing
    print(f"imported {len(run_ids)} published run(s): ids {', '.join(map(str, run_ids))}")


def merge(args: list[str]) -> None:
    parser = _parser("merge", "Copy the runs of another database (a GPU pod's results.db) into this one.")
    parser.add_argument("source", help="the database to copy from: a SQLite file's path or a database URL")
    parser.add_argument("--runs", nargs="*", type=int, help="run ids in the source (default: every run)")
    options = parser.parse_args(args)
    from sweep.store.database import database_url, redacted
    from sweep.store.merge import merge_runs

    if database_url(options.source) == database_url(options.db):
        sys.exit(f"ckpt-sweep: {redacted(database_url(options.source))} is the database merged into: nothing to copy")
    source, target = _engine(options.source), _engine(options.db, create=True)
    try:
        merged = merge_runs(target, source, options.runs)
    except ValueError as error:
        sys.exit(f"ckpt-sweep: nothing merged: {error}")
    for run in merged:
        state = "new run" if run.new else "run already here"
        print(
            f"{run.name} ({run.hardware}, {run.provenance}): {state} {run.target_id}, "
            f"{run.added} attempt(s) copied, {run.present} already present"
        )
    if not merged:
        print("the source holds no runs")


def remove(args: list[str]) -> None:
    parser = _parser("rm", "Delete runs with their cells, step samples and claims, in one transaction.")
    parser.add_argument("ids", nargs="+", type=int, metavar="ID", help="run ids, as `ckpt-sweep runs` lists them")
    parser.add_argument("--yes", action="store_true", help="do not ask (needed where standard input is no terminal)")
    options = parser.parse_args(args)
    from sweep.store.database import remove_runs

    engine, ids = _engine(options.db), list(dict.fromkeys(options.ids))
    try:
        for run in remove_runs(engine, ids, delete_them=False):
            print(f"run {run.id}: {run.name} ({run.hardware}, {run.provenance}), {run.cells} cell attempt(s)")
        if not options.yes:
            if not sys.stdin.isatty():
                sys.exit("ckpt-sweep: nothing removed: pass --yes to remove runs without a terminal to confirm on")
            if not _confirmed("remove this run" if len(ids) == 1 else f"remove these {len(ids)} runs"):
                sys.exit("ckpt-sweep: nothing removed")
        removed = remove_runs(engine, ids)
    except ValueError as error:
        sys.exit(f"ckpt-sweep: nothing removed: {error}")
    for run in removed:
        print(f"removed run {run.id}: {run.cells} cell attempt(s), {run.samples} step sample(s)")


def _confirmed(question: str) -> bool:
    """The user's yes on the terminal; anything else (Enter, Ctrl-D, Ctrl-C) is a no."""
    try:
        return input(f"{question}? [y/N] ").strip().lower() in ("y", "yes")
    except (EOFError, KeyboardInterrupt):
        print()
        return False


def diff(args: list[str]) -> None:
    parser = _parser("diff", "Compare two runs cell by cell (time ratio B/A, memory difference, status changes).")
    parser.add_argument("a", help="run id or hardware label, optionally @previous or @N (an earlier attempt)")
    parser.add_argument("b", help="run id or hardware label, optionally @previous or @N")
    parser.add_argument("--db-b", help="database URL of run B (default: the same database as A)")
    parser.add_argument("--out", default="reports", help="folder for the markdown and chart (default reports/)")
    parser.add_argument(
        "--fail-on",
        help="exit 1 when a cell of B fails one of these gates (comma-separated): slower:P%%, bigger:P%%, oom, failed",
    )
    options = parser.parse_args(args)
    from rich.console import Console

    from sweep.report.diff import diff_runs, gate_failures, markdown, parse_gates, rich_table
    from sweep.report.plots import diff_plot
    from sweep.report.text import slug

    try:
        gates = parse_gates(options.fail_on) if options.fail_on is not None else []
    except ValueError as error:
        sys.exit(f"ckpt-sweep: {error}")
    engine = _engine(options.db)
    engine_b = _engine(options.db_b) if options.db_b else None
    try:
        result = diff_runs(engine, options.a, options.b, engine_b)
    except ValueError as error:
        sys.exit(f"ckpt-sweep: {error}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=220)
    for line in result.environment:  # one line each, however long the value
        console.print(f"env: {line}", markup=False, highlight=False, no_wrap=True, overflow="ellipsis")
    console.print(rich_table(result))
    name = slug(f"diff-{result.label_a}-vs-{result.label_b}")
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    plot = diff_plot(result.cells, result.label_a, result.label_b, out / "plots" / f"{name}.png")
    page = out / f"{name}.md"
    page.write_text(markdown(result, plot.relative_to(out) if plot else None))
    print(page)
    failures = gate_failures(result, gates)
    if failures:
        print(
            f"ckpt-sweep: {len(failures)} cell(s) of {result.label_b} fail --fail-on {options.fail_on}:",
            file=sys.stderr,
        )
        print("\n".join(f"  {line}" for line in failures), file=sys.stderr)
        sys.exit(1)
    if gates:
        print(f"--fail-on {options.fail_on}: every cell passes")


def runs_verb(args: list[str]) -> None:
    parser = _parser("runs", "List the recorded runs: id, name, hardware, provenance, cells (ok), date.")
    options = parser.parse_args(args)
    from rich.console import Console
    from rich.table import Table

    from sweep.store.query import run_summaries

    runs = run_summaries(_engine(options.db))
    if runs.empty:
        print("no runs recorded yet: `ckpt-sweep run` records one, `ckpt-sweep import --docs` the docs' tables")
        return
    table = Table("id", "name", "hardware", "provenance", "cells (ok)", "started")
    for run in runs.itertuples():
        started = f"{run.started_at:%Y-%m-%d %H:%M}"
        table.add_row(str(run.id), run.name, run.hardware, run.provenance, f"{run.cells} ({run.ok})", started)
    Console(width=None if Console().is_terminal else 200).print(table)


def export(args: list[str]) -> None:
    from sweep.report.export import FORMATS, exported_cells, write_cells

    parser = _parser("export", "Write the cells of some or all runs, each with its run, as CSV or JSON.")
    parser.add_argument("--runs", nargs="*", help="run ids or hardware labels (default: every run)")
    parser.add_argument("--format", choices=FORMATS, default="csv")
    parser.add_argument("--out", default="-", help="file to write (default -: standard output)")
    options = parser.parse_args(args)
    engine = _engine(options.db)
    try:
        cells = exported_cells(engine, options.runs)
    except ValueError as error:
        sys.exit(f"ckpt-sweep: {error}")
    if options.out == "-":
        try:
            write_cells(cells, options.format, sys.stdout)
        except BrokenPipeError:  # `| head`: the reader has what it wanted
            sys.stderr.close()
        return
    path = Path(options.out)
    partial = path.with_name(f".{path.name}.partial")  # a failed export leaves no half-written file
    with partial.open("w", newline="") as out:
        write_cells(cells, options.format, out)
    partial.replace(path)
    print(f"{path}: {len(cells)} cells", file=sys.stderr)


def _card_arguments(parser: argparse.ArgumentParser) -> None:
    card = parser.add_mutually_exclusive_group(required=True)
    card.add_argument("--vram", help="card memory: 24, 24G, 24GB, 24GiB (all GiB: cards are sold in GiB) or 512MiB")
    card.add_argument("--card", help="a card by name: RTX 4090, L40S, H100 80GB, H200, ... (sweep/machine/cards.py)")
    parser.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help=f"share of the card kept free, 0 to under 1 ({DEFAULT_MARGIN:g})",
    )


def _card(options) -> tuple[int, float]:
    """(the card's bytes, the margin kept free); ValueError naming what cannot be read."""
    from sweep.machine.cards import card_bytes, check_margin, parse_size

    return card_bytes(options.card) if options.card else parse_size(options.vram), check_margin(options.margin)


def advise_verb(args: list[str]) -> None:
    parser = _parser("advise", "Which checkpointing mode to use for a family, shape and card.")
    parser.add_argument("--family", required=True)
    _card_arguments(parser)
    parser.add_argument("--hardware", help="use cells measured on this hardware label")
    parser.add_argument("--tokens", type=int)
    parser.add_argument("--preset", help="the shape, where several presets have the same tokens")
    parser.add_argument("--quantization", default="none")
    options = parser.parse_args(args)
    from sweep.report.advise import advise
    from sweep.store.query import load_cells, select_runs

    engine = _engine(options.db)
    try:
        vram, margin = _card(options)
        cells = load_cells(engine, select_runs(engine))
        advice = advise(
            cells,
            options.family,
            vram,
            hardware=options.hardware,
            tokens=options.tokens,
            preset=options.preset,
            quantization=options.quantization,
            margin=margin,
        )
        print(advice)
    except ValueError as error:
        sys.exit(f"ckpt-sweep: {error}")


def plan_verb(args: list[str]) -> None:
    from sweep.plan import VERIFY_ROUNDS, VERIFY_STEPS

    parser = _parser("plan", "The fastest checkpointing schedule that fits a card, found by prediction.")
    parser.add_argument("--family", required=True, help="a ckptlib family, synthetic, or your own with --builder")
    parser.add_argument("--builder", help="import path of your own build function (module.function)")
    parser.add_argument("--preset", help="default: the family's first real-size preset")
    _card_arguments(parser)
    parser.add_argument("--training", default="lora", choices=["lora", "frozen", "full"])
    parser.add_argument(
        "--quantization",
        help="base weights: none, int8-torchao, int8-sdnq, ... (default: none, or a quantized base when none fits)",
    )
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="the device model (default cuda)")
    parser.add_argument("--link", default="pcie5", help="host link: pcie4, pcie5 (default), nvlink-c2c")
    parser.add_argument("--hardware", help="calibrate step times on this family's cells measured on this label")
    parser.add_argument("--verify", action="store_true", help="measure the top 3 and the fitting docs modes")
    parser.add_argument(
        "--rounds", type=int, default=VERIFY_ROUNDS, help="--verify: runs of every schedule, order alternated"
    )
    parser.add_argument("--steps", type=int, default=VERIFY_STEPS, help="--verify: timed steps per cell and round")
    parser.add_argument("--out", default="reports", help="folder for the frontier's PNG (default reports/)")
    options = parser.parse_args(args)
    try:
        vram, margin = _card(options)  # before the imports below: a mistyped card is told at once
    except ValueError as error:
        sys.exit(f"ckpt-sweep: {error}")
    from ckptlib.units import format_bytes
    from sweep.config.builders import BuilderError, builder_default_preset, import_builder
    from sweep.plan.planning import Request, check_quantization, make_plan, plot_name, store
    from sweep.plan.verify import verify
    from sweep.report.plots import plan_plot

    try:
        quantization = options.quantization or "none"
        check_quantization(quantization)
        target = options.builder or _builder_path(options.family)
        preset = options.preset or builder_default_preset(import_builder(target)) or "default"
        card = options.card or f"{format_bytes(vram)} card"
        request = Request(
            options.family, target, preset, vram, card, options.training,
            quantization, options.device, options.link, options.hardware, margin=margin,
            try_quantized=options.quantization is None,
            try_smaller=True,
        )  # fmt: skip
        engine = _engine(options.db, create=True)
        outcome = make_plan(request, engine, progress=PlanningProgress())
    except (ValueError, BuilderError) as error:
        sys.exit(f"ckpt-sweep: {error}")
    print("\n".join(outcome.lines))
    run_id = store(engine, outcome)
    name = plot_name(outcome.request)
    picture = plan_plot(outcome, Path(options.out) / "plots" / f"{name}.png")
    print(f"stored as run {run_id} (provenance planned); the frontier: {picture}")
    if options.verify and outcome.recommended is not None:
        print("\n".join(verify(outcome, options.db, f"verify {name}", options.steps, rounds=options.rounds)))


class PlanningProgress:
    """'  planning 5/16 (31 s, about 68 s left): torch interval 2' as each pattern is estimated; a
    further plan (a quantized base, a smaller resolution, when nothing fits) is announced with why
    and counts from its own start."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def announce(self, text: str) -> None:
        print(f"  {text}", flush=True)
        self.started = time.perf_counter()

    def __call__(self, label: str, done: int, total: int) -> None:
        elapsed = time.perf_counter() - self.started
        left = elapsed / done * (total - done)
        print(f"  planning {done}/{total} ({elapsed:.0f} s, about {left:.0f} s left): {label}", flush=True)


def _builder_path(family: str) -> str:
    from sweep.config.structured import builtin_builder

    builder = builtin_builder(family)
    if builder is None:
        raise ValueError(f"unknown family {family!r}; a ckptlib family, synthetic, or your own with --builder")
    return builder


def new_family(args: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckpt-sweep new-family", description="Write a builder for your own model.")
    parser.add_argument("name", help="module name, e.g. my_model")
    options = parser.parse_args(args)
    from sweep.config.scaffold import new_family as write

    try:
        path = write(options.name, Path.cwd())
    except ValueError as error:
        sys.exit(f"ckpt-sweep: {error}")
    print(
        f"wrote {path}; run it from here with\n  ckpt-sweep run sweep=none family._target_={options.name}.build "
        f"family.name={options.name} mode=none,layer,unsloth"
    )


VERBS = {
    "run": run,
    "report": report,
    "import": import_tables,
    "runs": runs_verb,
    "export": export,
    "merge": merge,
    "rm": remove,
    "diff": diff,
    "advise": advise_verb,
    "plan": plan_verb,
    "new-family": new_family,
}


def _completing_run() -> None:
    """Hydra completes the words after the program; here they follow `ckpt-sweep run`, so the verb is
    taken out of the line it reads (COMP_LINE, and the cursor's place in it)."""
    import os

    line = os.environ.get("COMP_LINE", "")
    program, _, rest = line.partition(" ")
    if rest.startswith("run"):
        after = rest.removeprefix("run").lstrip(" ")
        os.environ["COMP_LINE"] = f"{program} {after}"
        cut = len(line) - len(os.environ["COMP_LINE"])
        os.environ["COMP_POINT"] = str(max(0, int(os.environ.get("COMP_POINT", len(line))) - cut))


# NOTE [ Leaving fast ]: the interpreter's teardown frees every object one by one: 1.7 s of a 20 s
# Flux.1 dev plan (the meta model, the predictor's op caches), 1.3 s of any command that imported
# torch, peft and diffusers. The console script, once its verb has returned (everything stored and
# printed; a failure exits through SystemExit as before), does what an exit does that matters (waits
# for threads that are not daemons, runs the exit handlers: logging's flush, Ray's shutdown,
# multiprocessing's), flushes, and leaves without the teardown. Only the console script: a caller of
# `main(argv)` (the tests, in process) keeps its interpreter.
def leave_without_teardown() -> None:
    import atexit
    import os
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a reader that went away (`| head`): Python's own exit says 120 then
        os._exit(120)
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    from sweep.run.quiet import install

    install()  # before anything imports torchao, diffusers or peft
    console, argv = argv is None, list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    if argv[0] in ("-V", "--version"):
        from importlib.metadata import version

        print(f"ckpt-sweep {version('ckpt-sweep')}")
        return
    if argv[0] in ("-sc", "--shell-completion"):  # Hydra's installed completion calls the bare command
        _completing_run()
        argv = ["run", *argv]
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        sys.exit(f"ckpt-sweep: unknown verb {verb!r}; valid verbs: {', '.join(VERBS)}\n\n{USAGE}")
    VERBS[verb](rest)
    if console:
        leave_without_teardown()


if __name__ == "__main__":
    main()
