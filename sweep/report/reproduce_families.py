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

import torch

from ckptlib import UnsupportedModeError
from ckptlib.adapters import LoKr
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
from .text import NOT_RUN, parse_tables

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
# A published cell is a figure or the docs' word for why there is none (its status as the table says it);
# "OOM (40.11 GiB)" is an OOM.
PUBLISHED_OK, PUBLISHED_OOM = TEXT[Status.OK], TEXT[Status.OOM]
NOT_MEASURED = "not measured"  # the docs' word for a cell their run could not measure
NO_FIGURE = (*FROM_TEXT, NOT_RUN, NOT_MEASURED)


@dataclass(frozen=True)
class Example:
    """What a table's SimpleTuner example config trains (`simpletuner/examples/<example>/config.json`
    and the dataset config it names), as the project's family, preset and shape overrides."""

    family: str | None = None  # None: the family whose docs name is the heading
    preset: str | None = None  # None: the family's default preset
    shape: dict = field(default_factory=dict)  # height, width, frames, batch over the preset's
    # shape overrides the prediction adds, where the family's inputs make the latents the example trains
    # of another size (Stable Cascade); the published rows keep `shape`
    predicted_at: dict = field(default_factory=dict)
    lora_rank: int = 16
    lokr: LoKr | None = None  # LyCORIS LoKr (lycoris_config.json) instead of PEFT LoRA
    # the weights' and activations' dtype: bf16 unless the example sets mixed_precision "no" (float32)
    dtype: torch.dtype = torch.bfloat16
    note: str = ""  # what of the example the prediction does not model
    known: str = ""  # what is known of the table's misses (the evidence, and whether it is established)
    # the family stands in for the example's own model, which the project has no family for: its
    # rows are predicted with it but not imported as that family's runs
    stand_in: bool = False

    @property
    def trains(self) -> str:
        """What the example trains, as a table's heading says it."""
        adapter = (
            f"LoRA rank {self.lora_rank}"
            if self.lokr is None
            else "LyCORIS LoKr (" + ", ".join(f"{c} factor {f}" for c, f in self.lokr.factors.items()) + ")"
        )
        return adapter + ("" if self.dtype == torch.bfloat16 else f", {str(self.dtype).removeprefix('torch.')}")


SQUARE_512 = {"height": 512, "width": 512}  # multidatabackend-small-dreambooth-512px.json: a 512 px square crop
# multidatabackend-small-video-480p*.json: pixel area 480 x 480, uncropped; a 16:9 bucket of that area
VIDEO_480 = {"height": 368, "width": 640}
LOKR = LoKr({"Attention": 2, "FeedForward": 4})  # lycoris_config.json of pixart, sana, cascade-stage-c, omnigen
# the Wan and ERNIE examples keep block weights in host memory (RamTorch): the absolute peaks do not
RAMTORCH = "RamTorch's host-resident block weights: the absolute peaks, and so the OOM verdicts, include them"
# ERNIE's misses are the size of its weights, as if each plain block kept a device copy of its
# weights until its backward; RamTorch's own Linear does not (read at lodestone-rock/RamTorch@371d2dc)
RAMTORCH_MISSES = (
    "the example trains with RamTorch (`ramtorch: true`), which streams each block's weights from host memory; "
    "the misses are consistent with a block that is not recomputed keeping its weights' device copy until its "
    "backward, which the prediction does not model: `none` less `layer` is 5.38 GiB above the prediction, "
    "the transformer's bf16 weights are 5.25 GiB, and interval2 (half the blocks plain) is 2.67 GiB above. "
    "RamTorch's Linear does not do that: its autograd function (ramtorch/modules/linear.py, BouncingLinearFn) "
    "saves the input and the host-resident weight for backward and copies the weight to the device again there, "
    "through two buffers per device shared by every layer. Not established: it needs a GPU run"
)
EXAMPLES: dict[str, Example] = {
    "ACE Step 1.5": Example(lora_rank=128),
    # Anima is Cosmos Predict 2's 2B transformer behind a small LLM adapter (SimpleTuner
    # helpers/models/anima/transformer.py), trained at pixel area 1024 on square crops
    "AnyFlow Distillation on Anima": Example(
        "cosmos2",
        "2b-t2i",
        shape={"height": 1024, "width": 1024},
        lora_rank=64,
        note="Anima's 6-layer LLM adapter in front of the transformer, and AnyFlow's distillation passes",
        known="`none` less `layer` is 12% above the published one; the adapter and the distillation passes, "
        "not modelled, are where to look first",
        stand_in=True,
    ),
    "AuraFlow": Example(shape=SQUARE_512, lora_rank=8),
    "Chroma": Example(shape=SQUARE_512),
    "Cosmos 2 Image": Example(shape=SQUARE_512, lokr=LoKr({"Attention": 25})),
    "Cosmos 3": Example(note="LyCORIS LoKr on its packed MoT attention, predicted as LoRA"),
    "ERNIE 4.5 Image": Example(shape=SQUARE_512, note=RAMTORCH, known=RAMTORCH_MISSES),
    "HiDream": Example(shape=SQUARE_512, lora_rank=128),
    "HunyuanVideo": Example(shape={**VIDEO_480, "batch": 2}),
    "Kandinsky 5 Video": Example(
        "kandinsky5",
        "t2v-lite",
        shape={**VIDEO_480, "frames": 49, "batch": 2},
        known="its attention offload wraps the attention kernel alone (ckptlib.modes.WIRINGS), which reproduces "
        "`activation-offload` below `layer`; interval2, seg2-stride4 and seg2-stride4-offload are each 7 to 9 GiB "
        "above the published delta (20 to 26% of it), as if the plain blocks' activations were a fifth smaller: "
        "the example's dataset trains 48 frames at pixel area 480 (predicted: 49 frames at 368x640). Not established",
    ),
    "Kolors": Example(shape=SQUARE_512),
    "Krea 2": Example(shape=SQUARE_512, lora_rank=64),
    "LongCat Image": Example(
        shape=SQUARE_512,
        known="the preset is the diffusers class's defaults, Flux.1's 19 + 38 blocks (11.9 B), where LongCat "
        "Image is published as a 6 B model and its published layer peak (12.4 GiB) fits 6 B of bf16 weights, "
        "not 11.9 (22.1 GiB); every predicted delta is 1.8 to 2.0x the published one, as with twice the blocks. "
        "The checkpoint's config is not available here (no hub access) to make the preset",
    ),
    "LTXVideo 0.9.5": Example("ltxvideo", "2b", shape=VIDEO_480),
    # The preset's shape, the heading's 1280x704 at 49 frames (the dataset's name says 720p): every H100 column
    # reproduces there, where the dataset's pixel area 720 (960x544) put each delta a third under and
    # predicted seg2-stride4 to fit
    "LTXVideo2 2.3": Example("ltxvideo2", "2.3-dev"),
    # helpers/models/lumina2/model.py: its system prompt, " <Prompt Start> " and the dataset's instance prompt
    # "🟫", which Gemma's tokenizer pads to 256 under a mask the transformer cuts the caption to: about 34
    # tokens (counted by word pieces; the tokenizer is not available here)
    "Lumina2": Example(shape={**SQUARE_512, "batch": 2, "text_tokens": 34}),
    # multidatabackend-reference-512px.json: pixel area 512 (the config's "resolution": 1024 is the default
    # its dataset overrides), with reference images as superresolution conditioning
    "OmniGen": Example(
        shape=SQUARE_512, lokr=LOKR, note="the dataset's reference images (conditioning) are not inputs"
    ),
    "PixArt": Example(shape={"batch": 3}, lokr=LOKR),
    "Qwen Image": Example(
        lora_rank=8,
        known="`none` ran out on the H100, where the prediction (70.2 GiB with the context) fits: beside the "
        "published `layer` peak, running out takes a `none` delta above 38.1 GiB, 30% over the predicted 29.4 GiB. "
        "The int8-sdnq-hadamard row does not settle "
        "it: its `layer` is predicted within 0.1 GiB (24.19 against 24.09 GiB), its `none` 14.9 GiB over "
        "(78.34 against 63.48): under SDNQ the prediction errs the other way. Not established. The docs now "
        "call this table older measurements of Qwen-Image 1.0 on an earlier example, and say its nearly equal "
        "interval and stride peaks do not show that those schedules were active; settling the `none` OOM takes "
        "that model's `none` cell measured on an H100",
    ),
    "Sana": Example(shape={"batch": 4}, lokr=LOKR),
    "SanaVideo": Example(shape=VIDEO_480),
    "SD 1.x": Example(shape=SQUARE_512),
    "SD3": Example(
        shape={"batch": 3},
        lora_rank=128,
        known="a plain block holds about 7% more than predicted, wherever blocks stay plain: `none` is 1.79 GiB "
        "(6.6%) under its published delta, `seg2-stride4` 0.85 GiB (6.8%), `interval2` 0.12 GiB; the tolerance is 5% "
        "of the peak, which `none` misses by 0.06 GiB. `activation-offload` is 0.53 GiB over (+2.54 against "
        "+2.01 GiB). Neither is established. PixArt's table was 6% under the same way until the caching allocator's "
        "large blocks were modelled (its 27 MiB activations hold 28); SD3's large tensors are 2 MiB multiples or "
        "leave more than 1 MiB, so that moved them by 0.04 GiB",
    ),
    "SDXL": Example(lokr=LoKr({"Attention": 12})),
    # Stage C's feed-forwards are no FeedForward class: LoKr adapts its attention only, as LyCORIS's class
    # match would.
    "Stable Cascade": Example(
        shape={"batch": 3},
        predicted_at={"height": 1344, "width": 1344},
        lokr=LOKR,
        dtype=torch.float32,  # the example's mixed_precision "no"
        note="SimpleTuner's stage C encoder as such: EfficientNet V2 S's features at stride 32 with no resize first "
        "(stable_cascade/autoencoder.py), 32 x 32 latents of the example's 1024 px crops, where the family's inputs "
        "follow the prior pipeline's 42.67 (1024 px -> 24 x 24); so the table is predicted at 1344 px, which makes "
        "the same 32 x 32 latents",
    ),
    "Wan 2.1 T2V 1.3B": Example(
        "wan",
        "t2v-1.3b",
        shape=VIDEO_480,
        note=RAMTORCH,
        known="`none` less `layer` is 6.2 GiB above the prediction; a plain block's device copy of its weights "
        "(2.6 GiB in all) would explain part at most, and RamTorch's Linear keeps none (ERNIE's table). "
        "Not established: it needs a GPU run",
    ),
    "Wan 2.1 T2V 14B": Example("wan", "t2v-14b", shape=VIDEO_480, note=RAMTORCH),
    # helpers/models/z_image/model.py: the instance prompt "🟫" in Qwen3's chat template (with the thinking
    # block), padded to 512 under a mask that keeps its real tokens; the model pads a caption to a multiple
    # of 32: 32 tokens
    "Z-Image Turbo": Example(shape={**SQUARE_512, "text_tokens": 32}, lora_rank=64),
}


@dataclass(frozen=True)
class PublishedCell:
    heading: str
    precision: str
    mode: str
    gpu: str  # a column of the table: H100, L40S
    status: str  # PUBLISHED_OK, or one of NO_FIGURE
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
    # bf16 rows of a control run without compilation where the main table ran compiled (Krea 2's
    # regional compilation: "not a clean VRAM comparison"); predictions are of eager runs
    eager: tuple[PublishedCell, ...] = ()

    @property
    def compared(self) -> tuple[PublishedCell, ...]:
        """The cells a prediction is compared with: the eager control's where there is one."""
        return self.eager or self.cells


def _cell(heading: str, precision: str, mode: str, gpu: str, text: str) -> PublishedCell:
    status = next((s for s in NO_FIGURE if text.startswith(s)), None)
    if status is not None:
        return PublishedCell(heading, precision, mode, gpu, status)
    seconds, peak = (part.strip() for part in text.split("/"))
    return PublishedCell(heading, precision, mode, gpu, PUBLISHED_OK, round(float(peak) * GIB), float(seconds))


EAGER_COLUMN = " no-compile"  # a control table's GPU columns: the same modes measured without compilation


def _eager_control(table) -> tuple[PublishedCell, ...]:
    """A control table of bf16 rows measured without compilation (Mode | H100 no-compile | ...), or ()."""
    columns = table.header[1:]
    if table.header[0] != "Mode" or not columns or not all(c.endswith(EAGER_COLUMN) for c in columns):
        return ()
    gpus = [c.removesuffix(EAGER_COLUMN) for c in columns]
    return tuple(
        _cell(table.heading, "bf16", row[0], gpu, text) for _, row in table.rows for gpu, text in zip(gpus, row[1:])
    )


def published_tables() -> list[Table]:
    """Each family's main table (Precision | Mode | H100 | L40S), in the page's order, with the
    project's family and preset where it has one, and its eager control table where it has one."""
    by_docs_name = {f.docs_name: name for name, f in all_families().items()}
    parsed = parse_tables(SOURCE.read_text(encoding="utf-8"), str(SOURCE))
    eager = {t.heading: cells for t in parsed if (cells := _eager_control(t))}
    tables, seen = [], set()
    for table in parsed:
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
        tables.append(Table(table.heading, family, preset, cells, why, example, eager.get(table.heading, ())))
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
        if table.family is None or table.example.stand_in:
            continue
        facts = describe_shape(table.family, table.preset, **table.example.shape)
        wiring = all_families()[table.family].wiring
        for published in table.cells:
            quantization = QUANTIZATION_OF_ROW.get(published.precision)
            recorded = published.status == PUBLISHED_OK or published.status in FROM_TEXT
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
        wiring = all_families()[family].wiring
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
                lokr=example.lokr,
                dtype=example.dtype,
                **{**example.shape, **example.predicted_at},
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
    ooms_missed: list[str] = field(default_factory=list)  # modes of counted OOMs the prediction fits


def compare(table: Table, gpu: str, predicted: dict[str, int | str]) -> Comparison:
    card = CARDS_MIB[GPUS[gpu][0]] * MIB
    context = DEVICE_MODELS[GPUS[gpu][1]].context_bytes
    cells = {c.mode: c for c in table.compared if c.precision == "bf16" and c.gpu == gpu}
    base, base_guess = cells.get(BASELINE), predicted.get(BASELINE)
    result = Comparison(table, gpu, [])
    for mode, cell in cells.items():
        guess = predicted.get(mode)
        guess_text = _gib(peak_on(guess, gpu)) if isinstance(guess, int) else (guess or "not predicted")
        delta, verdict = ["", "", ""], ""
        if cell.status == PUBLISHED_OK and isinstance(guess, int) and mode != BASELINE:
            if base is not None and base.status == PUBLISHED_OK and isinstance(base_guess, int):
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
        elif cell.status == PUBLISHED_OOM and isinstance(guess, int):
            needs = peak_on(guess, gpu) + context
            predicted_oom = needs > card
            verdict = (
                "OOM predicted"
                if predicted_oom
                else f"OOM not predicted: {_gib(needs)} with context on a {_gib(card)} card"
            )
            if base is not None and base.status == PUBLISHED_OOM:
                result.ooms_beside_layers += 1
                verdict += f"; {BASELINE} ran out too: not counted"
            else:
                result.ooms += 1
                result.ooms_predicted += predicted_oom
                if not predicted_oom:
                    result.ooms_missed.append(mode)
        published_text = _gib(cell.peak_bytes) if cell.status == PUBLISHED_OK else cell.status
        result.rows.append("| " + " | ".join([mode, published_text, guess_text, *delta, verdict]) + " |")
    return result


def _overrides(shape: dict) -> str:
    return "".join(f" {k}={v}" for k, v in shape.items())


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
        "them) at the shape, batch and adapter of the table's SimpleTuner example config (LoRA with",
        f"dropout {LORA_DROPOUT}, SimpleTuner's default, or LyCORIS LoKr in bypass mode as its `lycoris_config.json`",
        "sets it; the example's precision where it trains in float32), on the `cuda` device",
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
        missed = {c.table.heading: c.table.example.known for c in comparisons if c.misses or c.ooms_missed}
        unexplained = sorted(h for h, known in missed.items() if not known)
        lines.append(
            f"- Misses: median {statistics.median(errors):.2f} GiB, largest {max(errors):.2f} GiB off; "
            f"{len(missed) - len(unexplained)} of the {len(missed)} tables with misses (a delta off, or an OOM "
            "not predicted) say in their sections what is known of them and whether it is established"
            + (f"; not explained here: {', '.join(unexplained)}." if unexplained else ".")
        )
    lines.append("")
    for table in tables:
        if table.heading not in predicted:
            continue
        shape = _overrides(table.example.shape)
        if table.example.predicted_at:
            shape += ", predicted at" + _overrides(table.example.predicted_at)
        lines += [
            f"### {table.heading} ({table.family} {table.preset}{shape}, {table.example.trains})",
            "",
        ]
        if table.eager:
            lines += ["Compared with the table's control run without compilation: its main table ran compiled.", ""]
        if table.example.note:
            lines += [f"Not modelled: {table.example.note}.", ""]
        missed = any(c.misses or c.ooms_missed for c in comparisons if c.table is table)
        if table.example.known:
            lines += [f"Known of the misses: {table.example.known}.", ""]
        elif missed:
            lines += ["Misses not explained here.", ""]
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
