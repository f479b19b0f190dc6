"""SimpleTuner's published family tables (`sweep/published/simpletuner-families.md`, **published**)
beside predictions (**predicted**, nothing allocated): each table's bf16 rows predicted at the
family's preset with LoRA on the CUDA device model. Compared as each mode's peak less `layer`'s, in
which what the trainer holds besides the transformer (text encoders, VAE, data) cancels; every
published OOM is checked against the predicted peak on that card; what cannot be modelled is said.
`scripts/check_published.py` writes the page."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context

from ckptlib import UnsupportedModeError
from ckptlib.devices import DEVICE_MODELS
from ckptlib.families import all_families, builders, describe_shape
from ckptlib.modes import MODES, as_wired
from ckptlib.predict import predict
from ckptlib.quantize import QUANTIZATIONS
from ckptlib.units import GIB, MIB
from sweep.config.cell import identity_key
from sweep.machine.cards import CARDS_MIB
from sweep.store.results import CellResult
from sweep.vocabulary import FROM_TEXT, TEXT, Status

from .published import BUNDLED, published_run
from .text import parse_tables

SOURCE = BUNDLED / "simpletuner-families.md"
BASELINE = "layer"  # the mode every delta is taken from: the one every family's table has
DELTA_TOLERANCE_GIB = 0.25
DELTA_TOLERANCE_SHARE = 0.05  # of the published peak: "within 0.25 GiB or 5%"
# A schedule whose published peak is layer's to this much did not apply in that run (the docs warn
# of it for Qwen and Sana: "that is usually the option being ignored"); counted apart from misses.
NOT_APPLIED_GIB = 0.02
# Each GPU column of the tables: the card, and the device model (the cuBLAS workspace differs).
GPUS = {"H100": ("H100 80GB", "cuda"), "L40S": ("L40S", "cuda-pre-hopper")}
PREDICTED_ON = "cuda"  # one prediction per cell; another GPU's peak differs only by its workspace
LORA_DROPOUT = 0.1  # SimpleTuner's default (its lora section's field registry); no example sets another
STATUSES = ("OOM", "failed", "unsupported", "not run", "not measured")  # "OOM (40.11 GiB)" is an OOM


@dataclass(frozen=True)
class Example:
    """What a table's SimpleTuner example config trains (`simpletuner/examples/<example>/config.json`
    and the dataset config it names), as the project's family, preset and shape overrides."""

    family: str | None = None  # None: the family whose docs name is the heading
    preset: str | None = None  # None: the family's default preset
    shape: dict = field(default_factory=dict)  # height, width, frames, batch over the preset's
    lora_rank: int = 16
    note: str = ""  # what of the example the prediction does not model


SQUARE_512 = {"height": 512, "width": 512}  # multidatabackend-small-dreambooth-512px.json: a 512 px square crop
# multidatabackend-small-video-480p*.json: pixel area 480 x 480, uncropped; a 16:9 bucket of that area
VIDEO_480 = {"height": 368, "width": 640}
LOKR = "LyCORIS LoKr adapters, predicted as LoRA"
# the Wan examples keep block weights in host memory: deltas cancel them, absolute peaks do not
RAMTORCH = "RamTorch's host-resident block weights: the absolute peaks, and so the OOM verdicts, include them"
EXAMPLES: dict[str, Example] = {
    "ACE Step 1.5": Example(lora_rank=128),
    "AnyFlow Distillation on Anima": Example("anyflow", "stage1", lora_rank=64),
    "AuraFlow": Example(shape=SQUARE_512, lora_rank=8),
    "Chroma": Example(shape=SQUARE_512),
    "Cosmos 2 Image": Example(shape=SQUARE_512, note=LOKR),
    "Cosmos 3": Example(note=LOKR),
    "ERNIE 4.5 Image": Example(shape=SQUARE_512),
    "HiDream": Example(shape=SQUARE_512, lora_rank=128),
    "HunyuanVideo": Example(shape={**VIDEO_480, "batch": 2}),
    "Kandinsky 5 Video": Example("kandinsky5", "t2v-lite", shape={**VIDEO_480, "frames": 49, "batch": 2}),
    "Kolors": Example(shape=SQUARE_512),
    "Krea 2": Example(shape=SQUARE_512, lora_rank=64),
    "LongCat Image": Example(shape=SQUARE_512),
    "LTXVideo 0.9.5": Example("ltxvideo", "2b", shape=VIDEO_480),
    "LTXVideo2 2.3": Example("ltxvideo2", "2.3-dev", shape={"height": 544, "width": 960}),  # pixel area 720
    "Lumina2": Example(shape={**SQUARE_512, "batch": 2}),
    # multidatabackend-reference-512px.json: pixel area 512 (the config's "resolution": 1024 is the default
    # its dataset overrides), with reference images as superresolution conditioning
    "OmniGen": Example(shape=SQUARE_512, note=LOKR + "; the dataset's reference images (conditioning) are not inputs"),
    "PixArt": Example(shape={"batch": 3}, note=LOKR + "; the example's 42-block 900M is the project's 28-block preset"),
    "Qwen Image": Example(lora_rank=8),
    "Sana": Example(shape={"batch": 4}, note=LOKR),
    "SanaVideo": Example(shape=VIDEO_480),
    "SD 1.x": Example(shape=SQUARE_512),
    "SD3": Example(shape={"batch": 3}, lora_rank=128, note="the example's SD3.5 Medium is the project's SD3 Medium"),
    "SDXL": Example(note=LOKR),
    "Stable Cascade": Example(shape={"batch": 3}, note=LOKR),
    "Wan 2.1 T2V 1.3B": Example("wan", "t2v-1.3b", shape=VIDEO_480, note=RAMTORCH),
    "Wan 2.1 T2V 14B": Example("wan", "t2v-14b", shape=VIDEO_480, note=RAMTORCH),
    "Z-Image Turbo": Example(shape=SQUARE_512, lora_rank=64),
}


@dataclass(frozen=True)
class PublishedCell:
    heading: str
    precision: str
    mode: str
    gpu: str  # a column of the table: H100, L40S
    status: str  # ok, or one of STATUSES
    peak_bytes: int | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class Table:
    heading: str
    family: str | None  # the project's family; None: not modelled (`why`)
    preset: str | None
    cells: tuple[PublishedCell, ...]
    why: str = ""
    example: Example = field(default_factory=Example)


def _cell(heading: str, precision: str, mode: str, gpu: str, text: str) -> PublishedCell:
    status = next((s for s in STATUSES if text.startswith(s)), None)
    if status is not None:
        return PublishedCell(heading, precision, mode, gpu, status)
    seconds, peak = (part.strip() for part in text.split("/"))
    return PublishedCell(heading, precision, mode, gpu, "ok", round(float(peak) * GIB), float(seconds))


def published_tables() -> list[Table]:
    """Each family's main table (Precision | Mode | H100 | L40S), in the page's order, with the
    project's family and preset where it has one."""
    by_docs_name = {f.docs_name: name for name, f in all_families().items()}
    tables, seen = [], set()
    for table in parse_tables(SOURCE.read_text(encoding="utf-8"), str(SOURCE)):
        if table.header[:2] != ["Precision", "Mode"] or table.header[2] != "H100" or table.heading in seen:
            continue  # a control table beside the main one (Krea 2's no-compile run, Ideogram's backends)
        seen.add(table.heading)
        gpus = table.header[2:]
        cells = tuple(
            _cell(table.heading, row[0], row[1], gpu, text) for _, row in table.rows for gpu, text in zip(gpus, row[2:])
        )
        example = EXAMPLES.get(table.heading, Example())
        family, preset = example.family or by_docs_name.get(table.heading), example.preset
        why = ""
        if family is None:
            why = "no family of this name in the project"
        elif all_families()[family].unsupported:
            why, family = all_families()[family].unsupported, None
        else:
            preset = preset or all_families()[family].default_preset
        tables.append(Table(table.heading, family, preset, cells, why, example))
    return tables


RUN_NAME = "simpletuner-families"  # the imported runs' name, one per GPU
SOURCE_NOTE = "SimpleTuner documentation/experimental/SEGMENTED_CHECKPOINTING.md at bc8e6ab77"
# A docs row's precision -> the project's quantization (bf16 is the unquantized base). SimpleTuner's
# fp8-torchao (dynamic float8 activations) has no scheme here: its rows are not imported.
QUANTIZATION_OF_ROW = {"bf16": "none", **{q.simpletuner_row: name for name, q in QUANTIZATIONS.items()}}


def family_runs() -> list[dict]:
    """The family tables as runs of provenance `published` (as store.replace_runs takes them), one
    per GPU: each modelled table's cells at its example config (shape, batch, LoRA rank), each mode
    as SimpleTuner wired it for the family. Rows of a precision the project has no scheme for, `not
    run` and `not measured` are left out."""
    source = f"{SOURCE_NOTE} (bundled: sweep/published/{SOURCE.name})"
    runs = {column: published_run(RUN_NAME, card, source) for column, (card, _) in GPUS.items()}
    for table in published_tables():
        if table.family is None:
            continue
        facts = describe_shape(table.family, table.preset, **table.example.shape)
        wiring = all_families()[table.family].interval_regions
        for published in table.cells:
            quantization = QUANTIZATION_OF_ROW.get(published.precision)
            recorded = published.status == TEXT[Status.OK] or published.status in FROM_TEXT
            if quantization is None or not recorded or published.mode not in MODES:
                continue
            cell = {
                "family": table.family,
                "preset": table.preset,
                "mode": published.mode,
                "quantization": quantization,
                "training": "lora",
                "lora_rank": table.example.lora_rank,
                "regions": as_wired(MODES[published.mode], wiring).regions,
            }
            key = identity_key({**cell, **table.example.shape})
            runs[published.gpu]["cells"].append((cell, key, _result(published), facts))
    return list(runs.values())


def _result(published: PublishedCell) -> CellResult:
    if published.status in FROM_TEXT:
        return CellResult(FROM_TEXT[published.status])
    return CellResult(Status.OK, sec_per_step=published.seconds, peak_bytes=published.peak_bytes)


def _predict_table(job: tuple[str, str, Example, tuple[str, ...]]) -> dict[str, int | str]:
    """mode -> predicted peak bytes on the `cuda` device model, or why the mode is unsupported."""
    family, preset, example, modes = job
    build = getattr(builders, family)
    found: dict[str, int | str] = {}
    for mode in modes:
        wiring = all_families()[family].interval_regions
        config = as_wired(MODES[mode], wiring)  # the docs' columns as SimpleTuner ran them
        try:
            found[mode] = predict(
                build,
                config,
                PREDICTED_ON,
                preset=preset,
                training="lora",
                lora_rank=example.lora_rank,
                lora_dropout=LORA_DROPOUT,
                **example.shape,
            ).peak_bytes
        except UnsupportedModeError as error:
            found[mode] = f"unsupported: {error}"
        except Exception as error:  # noqa: BLE001 - one cell's failure is its row's, never the page's
            found[mode] = f"prediction failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return found


def predictions(tables: list[Table], workers: int = 2, progress: Callable[[str], None] | None = None) -> dict:
    """heading -> mode -> predicted peak (bytes on `cuda`) or why not, for each modelled table's
    bf16 modes; one family per forked worker."""
    jobs = {
        t.heading: (
            t.family,
            t.preset,
            t.example,
            tuple(dict.fromkeys(c.mode for c in t.cells if c.precision == "bf16")),
        )
        for t in tables
        if t.family is not None
    }
    found = {}
    with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
        futures = {pool.submit(_predict_table, job): heading for heading, job in jobs.items()}
        for done, future in enumerate(as_completed(futures), 1):
            found[futures[future]] = future.result()
            if progress is not None:
                progress(f"{done}/{len(jobs)} {futures[future]}")
    return {heading: found[heading] for heading in jobs}


def peak_on(predicted_bytes: int, gpu: str) -> int:
    """A peak predicted on `cuda`, on the GPU's own device model: its cuBLAS workspace instead."""
    device_model = DEVICE_MODELS[GPUS[gpu][1]]
    return predicted_bytes - DEVICE_MODELS[PREDICTED_ON].workspace_bytes + device_model.workspace_bytes


def within(difference: int, published_peak: int) -> bool:
    return abs(difference) <= max(DELTA_TOLERANCE_GIB * GIB, DELTA_TOLERANCE_SHARE * published_peak)


@dataclass
class Comparison:
    """One family's bf16 rows on one GPU against the predictions."""

    table: Table
    gpu: str
    rows: list[str]
    deltas: int = 0  # comparisons of a mode's peak less layer's
    deltas_within: int = 0
    ooms: int = 0  # published OOMs where layer fit the same card: activations ran out
    ooms_predicted: int = 0
    ooms_beside_layers: int = 0  # published OOMs where layer ran out too: not a checkpointing question
    not_applied: int = 0  # published equal to layer, predicted otherwise: the option did not apply there
    misses: list[tuple[str, int]] = field(default_factory=list)  # (mode, bytes off) beyond the tolerance


def compare(table: Table, gpu: str, predicted: dict[str, int | str]) -> Comparison:
    card = CARDS_MIB[GPUS[gpu][0]] * MIB
    context = DEVICE_MODELS[GPUS[gpu][1]].context_bytes
    cells = {c.mode: c for c in table.cells if c.precision == "bf16" and c.gpu == gpu}
    base, base_guess = cells.get(BASELINE), predicted.get(BASELINE)
    result = Comparison(table, gpu, [])
    for mode, cell in cells.items():
        guess = predicted.get(mode)
        guess_text = _gib(peak_on(guess, gpu)) if isinstance(guess, int) else (guess or "not predicted")
        delta, verdict = ["", "", ""], ""
        if cell.status == "ok" and isinstance(guess, int) and mode != BASELINE:
            if base is not None and base.status == "ok" and isinstance(base_guess, int):
                published = cell.peak_bytes - base.peak_bytes
                difference = (guess - base_guess) - published
                delta = [f"{value / GIB:+.2f}" for value in (published, guess - base_guess, difference)]
                if within(difference, cell.peak_bytes):
                    result.deltas += 1
                    result.deltas_within += 1
                    verdict = "within"
                elif abs(published) <= NOT_APPLIED_GIB * GIB:
                    result.not_applied += 1
                    verdict = "published equals layer: the option did not apply in that run"
                else:
                    result.deltas += 1
                    verdict = "off"
                    result.misses.append((mode, difference))
        elif cell.status == "OOM" and isinstance(guess, int):
            needs = peak_on(guess, gpu) + context
            predicted_oom = needs > card
            verdict = (
                "OOM predicted"
                if predicted_oom
                else f"OOM not predicted: {_gib(needs)} with context on a {_gib(card)} card"
            )
            if base is not None and base.status == "OOM":
                result.ooms_beside_layers += 1
                verdict += f"; {BASELINE} ran out too: not counted"
            else:
                result.ooms += 1
                result.ooms_predicted += predicted_oom
        published_text = _gib(cell.peak_bytes) if cell.status == "ok" else cell.status
        result.rows.append("| " + " | ".join([mode, published_text, guess_text, *delta, verdict]) + " |")
    return result


def _gib(value: int) -> str:
    return f"{value / GIB:.2f}"


def report(tables: list[Table], predicted: dict) -> list[str]:
    """The page's family section: a headline, each family's bf16 rows per GPU, and what is not modelled."""
    comparisons = [compare(t, gpu, predicted[t.heading]) for t in tables if t.heading in predicted for gpu in GPUS]
    lines = [
        "## SimpleTuner's family tables",
        "",
        f"From `sweep/published/{SOURCE.name}` (SimpleTuner's `SEGMENTED_CHECKPOINTING.md`, **published**),",
        "each family's bf16 rows **predicted** at the project's preset for it (`ckpt-sweep families` lists",
        "them) at the shape, batch and LoRA rank of the table's SimpleTuner example config, LoRA dropout",
        f"{LORA_DROPOUT} (SimpleTuner's default), on the `cuda` device",
        "model (L40S: its smaller cuBLAS workspace), each mode as SimpleTuner wires it for the family (its",
        "interval per block or in segments, its attention offload inside recomputed blocks too). A mode",
        f"is compared as its peak less `{BASELINE}`'s, published against predicted, which cancels what",
        "SimpleTuner's trainer holds besides the transformer; a difference within "
        f"{DELTA_TOLERANCE_GIB:.2f} GiB or {DELTA_TOLERANCE_SHARE:.0%}",
        "of the published peak counts as reproduced. A published OOM counts as predicted when the predicted",
        f"peak with the CUDA context exceeds the card. An OOM counts only where `{BASELINE}`, the mode that",
        "holds the fewest activations, fit the same card: where it ran out too, something other than",
        "the activations filled the card (the docs call ACE Step's rows coverage gaps), and no schedule",
        "is the answer; those are listed, not counted.",
        "",
    ]
    for gpu in GPUS:
        mine = [c for c in comparisons if c.gpu == gpu]
        deltas, ok = sum(c.deltas for c in mine), sum(c.deltas_within for c in mine)
        ooms, caught = sum(c.ooms for c in mine), sum(c.ooms_predicted for c in mine)
        families = len({c.table.heading for c in mine})
        ignored = sum(c.not_applied for c in mine)
        beside = sum(c.ooms_beside_layers for c in mine)
        lines.append(
            f"- **{gpu}**: {families} families; {ok} of {deltas} deltas against `{BASELINE}` reproduced; "
            f"{caught} of {ooms} published OOMs predicted where `{BASELINE}` fit ({beside} more where it ran "
            f"out too); {ignored} published peaks equal `{BASELINE}`'s where the prediction differs (the "
            "option did not apply in that run), not counted."
        )
    errors = [abs(off) / GIB for c in comparisons for _, off in c.misses]
    if errors:
        lines.append(f"- Misses: median {statistics.median(errors):.2f} GiB, largest {max(errors):.2f} GiB off.")
    lines.append("")
    for table in tables:
        if table.heading not in predicted:
            continue
        shape = "".join(f" {k}={v}" for k, v in table.example.shape.items())
        lines += [
            f"### {table.heading} ({table.family} {table.preset}{shape}, LoRA rank {table.example.lora_rank})",
            "",
        ]
        if table.example.note:
            lines += [f"Not modelled: {table.example.note}.", ""]
        for comparison in (c for c in comparisons if c.table is table):
            lines += [
                f"{comparison.gpu}:",
                "",
                f"| mode | published GiB | predicted GiB | published vs {BASELINE} | predicted vs {BASELINE} "
                "| difference | verdict |",
                "|---|---|---|---|---|---|---|",
                *comparison.rows,
                "",
            ]
    lines += ["### Tables not modelled", ""]
    lines += [f"- {t.heading}: {t.why}" for t in tables if t.family is None]
    return lines
