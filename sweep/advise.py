"""`ckpt-sweep advise`: the docs' decision rule applied to recorded cells.

No checkpointing if it fits; otherwise the fastest mode that fits with a safety margin; when
nothing fits, say so and name what comes closest.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from .tables import GIB

_UNITS = {"gib": GIB, "gb": 10 ** 9, "mib": 2 ** 20, "mb": 10 ** 6, "": GIB}
DEFAULT_MARGIN = 0.10


def parse_size(text: str) -> int:
    """'48GiB', '48 GB', '80' (GiB) -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match[2].lower() not in _UNITS:
        raise ValueError(f"cannot read memory size {text!r}; write e.g. 48GiB, 24GB or 80")
    return round(float(match[1]) * _UNITS[match[2].lower()])


@dataclass
class Advice:
    mode: str | None  # None: nothing recorded fits
    hardware: str
    budget_bytes: int
    lines: list[str]

    def __str__(self) -> str:
        return "\n".join(self.lines)


def advise(cells: pd.DataFrame, family: str, vram_bytes: int, hardware: str | None = None,
           tokens: int | None = None, preset: str | None = None, quantization: str = "none",
           margin: float = DEFAULT_MARGIN) -> Advice:
    """Pick a mode for `family` (and shape) on a card of `vram_bytes`, from the cells given."""
    chosen = cells[(cells["family"] == family) & (cells["quantization"] == quantization)]
    if tokens is not None:
        chosen = chosen[chosen["tokens"] == tokens]
    if preset is not None:
        chosen = chosen[chosen["preset"] == preset]
    if chosen.empty:
        raise ValueError(f"no recorded cells for family {family!r} with that shape and quantization {quantization!r}")
    shapes = chosen[["preset", "tokens"]].drop_duplicates()
    if len(shapes) > 1:
        listing = ", ".join(f"{p} ({'' if pd.isna(t) else int(t)} tokens)" for p, t in shapes.itertuples(index=False))
        raise ValueError(f"several shapes recorded for {family}: {listing}; choose one with --preset or --tokens")
    notes = []
    if hardware is None:
        counts = chosen.groupby("hardware").size().sort_values(ascending=False, kind="stable")
        hardware = counts.index[0]
        if len(counts) > 1:
            notes.append(f"data from {hardware} (most complete); also recorded: {', '.join(counts.index[1:])} "
                         f"(choose with --hardware)")
    chosen = chosen[chosen["hardware"] == hardware]
    if chosen.empty:
        raise ValueError(f"no recorded cells for {family} on {hardware!r}")
    budget = int(vram_bytes * (1 - margin))
    provenance = ", ".join(sorted(set(chosen["provenance"])))
    head = [f"{family} {chosen['preset'].iloc[0]} on a {vram_bytes / GIB:.1f} GiB card: budget {budget / GIB:.2f} GiB "
            f"({margin:.0%} safety margin), {provenance} data from {hardware}", *notes]
    if hardware.startswith("CPU:"):
        head.append("caution: CPU data: peaks are tracked tensor bytes of a CPU run, not GPU memory; "
                    "measure on the target GPU before trusting a fit")
    ok = chosen[chosen["status"] == "ok"].sort_values("sec_per_step")
    fits = ok[ok["peak_bytes"] <= budget]
    described = [f"  {r.mode:22s} {r.text:24s} {'fits' if r.peak_bytes <= budget else 'over budget'}"
                 for r in ok.itertuples()]
    failed = [f"  {r.mode:22s} {r.text}" for r in chosen[chosen["status"] != "ok"].itertuples()]
    none_row = fits[fits["mode"] == "none"]
    if not none_row.empty:
        r = none_row.iloc[0]
        verdict = [f"use: none (no checkpointing): it fits at {r.peak_bytes / GIB:.2f} GiB and is the fastest "
                   f"at {r.sec_per_step:.4f}s/step"]
        mode = "none"
    elif not fits.empty:
        r = fits.iloc[0]
        baseline = ok[ok["mode"] == "none"]
        slower = f", {r.sec_per_step / baseline.iloc[0].sec_per_step:.2f}x the no-checkpoint step" if not baseline.empty else ""
        verdict = [f"use: {r['mode']}: the fastest mode that fits ({r.sec_per_step:.4f}s/step at "
                   f"{r.peak_bytes / GIB:.2f} GiB{slower})"]
        mode = r["mode"]
    else:
        mode = None
        verdict = ["nothing recorded fits this card"]
        if not ok.empty:
            r = ok.sort_values("peak_bytes").iloc[0]
            verdict.append(f"closest: {r['mode']} at {r.peak_bytes / GIB:.2f} GiB, {(r.peak_bytes - budget) / GIB:.2f} GiB "
                           f"over the budget")
    lines = head + verdict + ["measured modes (fastest first):", *described]
    if failed:
        lines += ["did not run to completion:", *failed]
    return Advice(mode, hardware, budget, lines)
