"""`ckpt-sweep advise`: the docs' decision rule applied to recorded cells.

No checkpointing if it fits; otherwise the fastest mode that fits with a safety margin; when
nothing fits, say so and name what comes closest.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ckptlib.quantize import NAMES as QUANTIZATION_NAMES
from ckptlib.units import GIB
from sweep.machine.cards import DEFAULT_MARGIN, Budget
from sweep.vocabulary import Provenance, Status

from .matrices import resolution, variant
from .text import cell_texts


@dataclass
class Advice:
    mode: str | None  # None: nothing recorded fits
    hardware: str
    budget_bytes: int
    lines: list[str]

    def __str__(self) -> str:
        return "\n".join(self.lines)


# Modes by expected step time, cheapest first, for ranking predictions (which have no time): the
# docs' published timings put no recompute first, FFN-only recompute before whole blocks, partial
# segments before every block, and each offloading variant after its plain twin.
# activation-offload recomputes every block and offloads its attention too (as SimpleTuner does):
# layer's work plus the copies, after layer, never before.
EXPECTED_COST_ORDER = [
    "none",
    "torch-ffn",
    "torch-ffn-offload",
    "unsloth-ffn",
    "seg2-stride4",
    "seg2-stride4-offload-plain",
    "seg2-stride4-offload",
    "interval2",
    "layer",
    "activation-offload",
    "unsloth",
]


def advise(
    cells: pd.DataFrame,
    family: str,
    vram_bytes: int,
    hardware: str | None = None,
    tokens: int | None = None,
    preset: str | None = None,
    quantization: str = "none",
    margin: float = DEFAULT_MARGIN,
) -> Advice:
    """Pick a mode for `family` (and shape) on a card of `vram_bytes`, from the cells given.
    Predictions stand in for modes that have no measurement, and are labelled as such."""
    planned = cells[cells["provenance"] == Provenance.PLANNED]
    cells = cells[cells["provenance"] != Provenance.PLANNED]
    chosen = _one_shape(cells, family, tokens, preset, quantization)
    chosen = chosen.reindex(
        columns=[*chosen.columns.drop("device", errors="ignore"), "device"]
    )  # a predicted run's device model
    measured, hardware, notes = _measured_on(chosen[chosen["provenance"] != Provenance.PREDICTED], family, hardware)
    device_kind = "cpu" if (hardware or "").startswith("CPU:") else "cuda"
    predicted = _standing_in(chosen[chosen["provenance"] == Provenance.PREDICTED], measured, device_kind)
    budget = Budget.on(device_kind, vram_bytes, margin)
    sources = ", ".join(sorted(set(measured["provenance"]))) or "no measured"
    first = chosen.iloc[0]
    at = resolution(first.get("height"), first.get("width"), first.get("frames"))
    head = [
        f"{family} {first['preset']}{f' at {at}' if at else ''}: {budget.heading()}; {sources} data"
        + (f" from {hardware}" if hardware else ""),
        *notes,
    ]
    if not predicted.empty:
        head.append(
            f"predictions ({predicted['hardware'].iloc[0]}) stand in for {len(predicted)} mode(s) with no "
            f"measurement: {', '.join(predicted['mode'])}"
        )
    if device_kind == "cpu":
        head.append(
            "caution: CPU data: peaks are tracked tensor bytes of a CPU run, not GPU memory; "
            "measure on the target GPU before trusting a fit"
        )
    ok = measured[measured["status"] == Status.OK].sort_values("sec_per_step")
    mode, verdict = _verdict(ok, predicted, budget)

    def fit(peak: int) -> str:
        return "fits" if budget.fits(peak) else "over budget"

    described = [f"  {r.mode:22s} {text:24s} {fit(r.peak_bytes)}" for r, text in zip(ok.itertuples(), cell_texts(ok))]
    described += [
        f"  {r.mode:22s} {'predicted ' + format(r.peak_bytes / GIB, '.2f') + ' GiB':24s} "
        f"{fit(r.peak_bytes)} (predicted)"
        for r in predicted.itertuples()
    ]
    lines_plan = _stored_plans(planned, family, chosen["preset"].iloc[0], budget)
    if mode is None and not lines_plan:
        lines_plan = _other_precisions(cells, family, chosen["preset"].iloc[0], quantization, budget)
    not_ok = measured[measured["status"] != Status.OK]
    failed = [f"  {r.mode:22s} {text}" for r, text in zip(not_ok.itertuples(), cell_texts(not_ok))]
    lines = head + verdict + ["modes (measured fastest first, then predicted):", *described]
    if failed:
        lines += ["did not run to completion:", *failed]
    lines += lines_plan
    hardware = hardware or (predicted["hardware"].iloc[0] if not predicted.empty else "?")
    return Advice(mode, hardware, budget.bytes, lines)


def _stored_plans(planned: pd.DataFrame, family: str, preset: str, budget: Budget) -> list[str]:
    """Recommendations of stored plans (`ckpt-sweep plan`) for this family and preset that fit the budget."""
    chosen = planned[(planned["family"] == family) & (planned["preset"] == preset)]
    lines = []
    for cell in chosen.itertuples():
        report = cell.report or {}
        if report.get("recommended") and budget.fits(cell.peak_bytes):
            seconds = (cell.report or {}).get("predicted_s_per_step", float("nan"))
            lines.append(
                f"stored plan ({cell.hardware}): {report.get('schedule')}, predicted {cell.peak_bytes / GIB:.2f} GiB, "
                f"{seconds:.3f} s/step (a prediction; ckpt-sweep plan --verify measures it)"
            )
    return lines


def _other_precisions(cells: pd.DataFrame, family: str, preset: str, quantization: str, budget: Budget) -> list[str]:
    """When nothing fits: what fits with another base precision recorded for this model and shape
    (the smallest peak of each), else how to find out for the quantized bases."""
    others = cells[
        (cells["family"] == family)
        & (cells["preset"] == preset)
        & (cells["quantization"] != quantization)
        & cells["peak_bytes"].notna()
        & cells["status"].isin([Status.OK, Status.OOM])
    ]
    lines = []
    for other, group in others.groupby("quantization", sort=True):
        smallest = group.sort_values("peak_bytes").iloc[0]
        verdict = "fits" if budget.fits(smallest.peak_bytes) else "does not fit either"
        lines.append(
            f"  {other}: {smallest['mode']} {verdict} at {smallest.peak_bytes / GIB:.2f} GiB ({smallest.provenance}); "
            f"ckpt-sweep advise --family {family} --preset {preset} --quantization {other} ... answers in full"
        )
    if lines:
        return ["nothing fits at this precision; with another base precision:", *lines]
    quantized = [q for q in QUANTIZATION_NAMES if q != "none"] if quantization == "none" else []
    if not quantized:
        return []
    return [
        f"nothing fits at this precision; a quantized base ({', '.join(quantized)}) holds about half the weights: "
        + how_to_get_cells(family, preset, quantized[0])
    ]


def how_to_get_cells(family: str, preset: str | None, quantization: str) -> str:
    """The commands that record cells `advise` can answer from: predicted in a minute on any
    machine, measured on the GPU, or a planned schedule."""
    cell = f"family={family}" + (f" preset={preset}" if preset else "") + f" quantization={quantization}"
    modes = ",".join(EXPECTED_COST_ORDER)
    return (
        f"predict them (ckpt-sweep run sweep=none {cell} mode={modes} predict=true), measure them on the GPU "
        f"(the same without predict=true), or plan a schedule (ckpt-sweep plan --family {family} --card ... "
        f"--quantization {quantization})"
    )


def _one_shape(
    cells: pd.DataFrame, family: str, tokens: int | None, preset: str | None, quantization: str
) -> pd.DataFrame:
    chosen = cells[(cells["family"] == family) & (cells["quantization"] == quantization)]
    if tokens is not None:
        chosen = chosen[chosen["tokens"] == tokens]
    if preset is not None:
        chosen = chosen[chosen["preset"] == preset]
    if chosen.empty:
        raise ValueError(
            f"no recorded cells for family {family!r} with that shape and quantization {quantization!r}; "
            + how_to_get_cells(family, preset, quantization)
        )
    defaults = chosen[[variant(c, m) == "" for c, m in zip(chosen["config"], chosen["mode"])]]
    chosen = defaults if not defaults.empty else chosen  # near-duplicates (interval 3, rank 8): the defaults
    shapes = chosen[["preset", "tokens"]].drop_duplicates()
    if len(shapes) == 1 and family != "synthetic" and str(shapes["preset"].iloc[0]).startswith("tiny"):
        raise ValueError(
            f"only {family}'s tiny test preset is recorded for that question, and a tiny preset says "
            f"nothing about the real model's memory; " + how_to_get_cells(family, None, quantization)
        )
    if len(shapes) > 1:
        listing = ", ".join(f"{p} ({'' if pd.isna(t) else int(t)} tokens)" for p, t in shapes.itertuples(index=False))
        raise ValueError(f"several shapes recorded for {family}: {listing}; choose one with --preset or --tokens")
    return chosen


def _measured_on(
    measured: pd.DataFrame, family: str, hardware: str | None
) -> tuple[pd.DataFrame, str | None, list[str]]:
    """Measured (or published) cells of one hardware: the one asked for, or the most complete."""
    if measured.empty:
        return measured, hardware, []
    notes = []
    if hardware is None:
        counts = measured.groupby("hardware").size().sort_values(ascending=False, kind="stable")
        hardware = counts.index[0]
        if len(counts) > 1:
            notes.append(
                f"data from {hardware} (most complete); also recorded: {', '.join(counts.index[1:])} "
                f"(choose with --hardware)"
            )
    measured = measured[measured["hardware"] == hardware]
    if measured.empty:
        raise ValueError(f"no recorded cells for {family} on {hardware!r}")
    return measured, hardware, notes


def _standing_in(predicted: pd.DataFrame, measured: pd.DataFrame, device_kind: str) -> pd.DataFrame:
    """Predictions on the same kind of device for modes without a measured figure, cheapest first."""
    predicted = predicted[predicted["device"].astype("string").fillna("").str.removeprefix("predicted:") == device_kind]
    figured = set(measured.loc[measured["status"].isin([Status.OK, Status.OOM]), "mode"])
    predicted = predicted[~predicted["mode"].isin(figured) & predicted["peak_bytes"].notna()]
    rank = {m: i for i, m in enumerate(EXPECTED_COST_ORDER)}
    predicted = predicted.drop_duplicates("mode", keep="last")
    return predicted.assign(_rank=predicted["mode"].map(lambda m: rank.get(m, len(rank)))).sort_values("_rank")


def _verdict(ok: pd.DataFrame, predicted: pd.DataFrame, budget: Budget) -> tuple[str | None, list[str]]:
    """The docs' rule: no checkpointing if it fits, else the fastest measured mode that fits, else the
    cheapest predicted one; when nothing fits, what comes closest."""
    fits, predicted_fits = ok[budget.fits(ok["peak_bytes"])], predicted[budget.fits(predicted["peak_bytes"])]
    caution = "(a prediction, not a measurement: measure it before relying on it)"
    if not fits[fits["mode"] == "none"].empty:
        r = fits[fits["mode"] == "none"].iloc[0]
        return "none", [
            f"use: none (no checkpointing): it fits at {r.peak_bytes / GIB:.2f} GiB and is the fastest "
            f"at {r.sec_per_step:.4f}s/step"
        ]
    if not predicted_fits[predicted_fits["mode"] == "none"].empty:
        r = predicted_fits[predicted_fits["mode"] == "none"].iloc[0]
        return "none", [f"use: none (no checkpointing): predicted to fit at {r.peak_bytes / GIB:.2f} GiB {caution}"]
    if not fits.empty:
        r = fits.iloc[0]
        baseline = ok[ok["mode"] == "none"]
        slower = (
            f", {r.sec_per_step / baseline.iloc[0].sec_per_step:.2f}x the no-checkpoint step"
            if not baseline.empty
            else ""
        )
        return r["mode"], [
            f"use: {r['mode']}: the fastest measured mode that fits ({r.sec_per_step:.4f}s/step at "
            f"{r.peak_bytes / GIB:.2f} GiB{slower})"
        ]
    if not predicted_fits.empty:
        r = predicted_fits.iloc[0]
        return r["mode"], [
            f"use: {r['mode']}: predicted to fit at {r.peak_bytes / GIB:.2f} GiB, the cheapest such "
            f"mode by the docs' expected cost order {caution}"
        ]
    verdict = ["nothing recorded fits this card"]
    figures = pd.concat([ok[["mode", "peak_bytes"]], predicted[["mode", "peak_bytes"]]])
    if not figures.empty:
        r = figures.sort_values("peak_bytes").iloc[0]
        verdict.append(f"closest: {r['mode']}: {budget.against(r.peak_bytes)}")
    return None, verdict
