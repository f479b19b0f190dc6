"""Matplotlib figures for the reports: time vs memory per mode, predicted memory per mode, and
hardware diffs. Small peaks are drawn in MiB, labels are placed so they do not overlap, and each
precision gets its own marker.

A report's figure is drawn only when what it shows changed: each PNG carries a fingerprint of its
data, title and this module's code (`redrawn`), so regenerating the docs redraws the figures of the
cells that moved and none of the others.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import textwrap
from contextvars import ContextVar
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ckptlib.units import GIB, unit_for  # noqa: E402
from sweep.machine.cards import PLOTTED, card_bytes  # noqa: E402
from sweep.vocabulary import Provenance, Status  # noqa: E402

from .matrices import describe_setting, mode_label, precision, shared_run_settings  # noqa: E402
from .text import cell_name, slug  # noqa: E402

MARKERS = "osD^vP*X"
CARD_COLOR = "tab:blue"
FINGERPRINT_KEY = "ckpt-sweep drawn from"  # a PNG text chunk
_CODE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
_FINGERPRINT: ContextVar[str | None] = ContextVar("fingerprint", default=None)


def redrawn(draw):
    """`draw(*what, path)` that leaves `path` as it is when it was drawn from the same arguments by
    the same code (its fingerprint), and stamps the fingerprint on what it draws."""

    @functools.wraps(draw)
    def draw_if_changed(*args) -> Path:
        *what, path = args
        drawn_from = "\n".join([_CODE, draw.__name__, *map(_stable, what)])
        fingerprint = hashlib.sha256(drawn_from.encode()).hexdigest()
        if _fingerprint_of(path) == fingerprint:
            return path
        token = _FINGERPRINT.set(fingerprint)
        try:
            return draw(*args)
        finally:
            _FINGERPRINT.reset(token)

    return draw_if_changed


def _stable(value) -> str:
    """Everything a figure is drawn from, as text (a frame's repr elides rows)."""
    if isinstance(value, pd.DataFrame):
        return value.to_csv(index=False)  # the rows, not where they sat in the frame they were cut from
    if dataclasses.is_dataclass(value):
        return repr([(f.name, _stable(getattr(value, f.name))) for f in dataclasses.fields(value)])
    return repr(value)


def _fingerprint_of(path: Path) -> str | None:
    from PIL import Image  # matplotlib's own dependency

    try:
        with Image.open(path) as image:
            return image.text.get(FINGERPRINT_KEY)
    except (OSError, ValueError):  # missing, or not a PNG
        return None


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fingerprint = _FINGERPRINT.get()
    fig.savefig(path, dpi=110, metadata={FINGERPRINT_KEY: fingerprint} if fingerprint else None)
    plt.close(fig)
    return path


def pareto_front(points: pd.DataFrame) -> pd.DataFrame:
    """Points no other point beats on both sec/step and peak."""
    ordered = points.sort_values(["sec", "peak"])
    front, best_memory = [], float("inf")
    for row in ordered.itertuples():
        if row.peak < best_memory:
            front.append(row.Index)
            best_memory = row.peak
    return ordered.loc[front]


OFFSETS = ((5, 4), (5, -11), (-8, 6), (-8, -12), (12, 14), (12, -20), (-20, 16), (-20, -24))


def place_labels(ax, xs, ys, labels, fontsize=8) -> None:
    """Annotate each point at the first offset (in points) whose text box overlaps no box placed
    before it; boxes are estimated from the label's length."""
    fig = ax.figure
    fig.canvas.draw()
    to_display = ax.transData.transform
    scale = fig.dpi / 72
    taken = []
    for x, y, label in sorted(zip(xs, ys, labels), key=lambda p: (p[0], p[1])):
        px, py = to_display((x, y))
        width, height = 0.6 * fontsize * len(label) * scale, 1.2 * fontsize * scale
        for dx, dy in OFFSETS:
            left = px + dx * scale - (width if dx < 0 else 0)
            bottom = py + dy * scale
            box = (left, bottom, left + width, bottom + height)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in taken):
                break
        taken.append(box)
        ax.annotate(
            label,
            (x, y),
            textcoords="offset points",
            xytext=(dx, dy),
            fontsize=fontsize,
            ha="right" if dx < 0 else "left",
        )


def _card_lines(ax, unit: str, top: float, horizontal: bool) -> None:
    """The usual card sizes as lines, labelled along the line (never beside each other)."""
    if unit != "GiB":
        return
    for name, size in ((name, card_bytes(name) / GIB) for name in PLOTTED):
        if size > 1.5 * top:
            continue
        if horizontal:
            ax.axhline(size, color=CARD_COLOR, linestyle="--", linewidth=0.8)
            ax.text(
                0.995,
                size,
                f"{name}: {size:.2f} GiB",
                transform=ax.get_yaxis_transform(),
                ha="right",
                va="bottom",
                fontsize=7,
                color=CARD_COLOR,
            )
        else:
            ax.axvline(size, color=CARD_COLOR, linestyle="--", linewidth=0.8)
            ax.text(
                size,
                0.99,
                f"{name}: {size:.2f} GiB",
                transform=ax.get_xaxis_transform(),
                rotation=90,
                ha="center",
                va="top",
                fontsize=7,
                color=CARD_COLOR,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},  # readable over a bar
            )


@redrawn
def tradeoff_plot(points: pd.DataFrame, title: str, path: Path) -> Path:
    """sec/step against peak, one marker per precision, the Pareto frontier drawn through."""
    unit, size = unit_for(points["peak"].max())
    fig, ax = plt.subplots(figsize=(7, 4.8))
    for marker, (label, group) in zip(MARKERS, points.groupby("precision", sort=False, observed=True)):
        ax.scatter(group["sec"], group["peak"] / size, color="tab:gray", marker=marker, zorder=2, label=str(label))
    front = pareto_front(points)
    ax.plot(front["sec"], front["peak"] / size, color="tab:red", zorder=3, label="Pareto frontier")
    _card_lines(ax, unit, points["peak"].max() / size, horizontal=True)
    ax.set_xlabel("sec/step (median of the measured steps, or as published)")
    ax.set_ylabel(f"peak {unit}")
    ax.set_title(textwrap.fill(title, 90), fontsize=9)
    ax.legend(loc="upper right", fontsize=8)
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.12 * (high - low))  # room above the highest point for its label
    place_labels(ax, points["sec"], points["peak"] / size, list(points["label"]))
    return _save(fig, path)


@redrawn
def memory_plot(points: pd.DataFrame, title: str, path: Path) -> Path:
    """Predicted peaks (no times) per mode, against card sizes."""
    unit, size = unit_for(points["peak"].max())
    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.35 * len(points))))
    ax.barh(points["label"], points["peak"] / size, color="tab:gray")
    _card_lines(ax, unit, points["peak"].max() / size, horizontal=False)
    ax.set_xlabel(f"predicted peak {unit}")
    fig.suptitle(textwrap.fill(title, 90), fontsize=9)  # over the figure: the labels take half its width
    ax.invert_yaxis()
    return _save(fig, path)


def _point_labels(points: pd.DataFrame, titled: tuple[str, ...] = ()) -> pd.Series:
    """A point's mode as its table heads it (the docs' synthetic names), with any variant but the
    settings the title says (`titled`) and the precision (the marker says it)."""
    labels = [
        mode_label(family, mode, config, shown_elsewhere=("dtype", *titled))
        for family, mode, config in zip(points["family"], points["mode"], points["config"])
    ]
    return pd.Series(labels, index=points.index)


def _titled(points: pd.DataFrame, title_words: list[str]) -> tuple[str, ...]:
    """The run settings every point shares and the title already says."""
    shared = shared_run_settings(points["config"])
    return tuple(name for name, value in shared.items() if describe_setting(name, value) in title_words)


def matrix_plots(cells: pd.DataFrame, matrices, out_dir: Path, progress=None) -> dict[str, list[Path]]:
    """One plot per table, hardware and shape: time vs memory where cells were timed, predicted
    memory per mode where they were predicted; `progress(tables done, tables)` after each table."""
    plots: dict[str, list[Path]] = {}
    figures = cells[cells["peak_bytes"].notna()]
    figures = figures.assign(
        sec=figures["sec_per_step"].astype(float),
        peak=figures["peak_bytes"].astype(float),
        precision=precision(figures),
        label=_point_labels(figures),
    )
    timed = figures[(figures["status"] == Status.OK) & figures["sec"].notna()]
    predicted = figures[figures["provenance"] == Provenance.PREDICTED]
    for done, matrix in enumerate(matrices, 1):
        if progress is not None:
            progress(done, len(matrices))
        for frame, draw in ((timed, tradeoff_plot), (predicted, memory_plot)):
            part = frame[(frame["family"] == matrix.family) & (frame["run_name"] == matrix.sweep)]
            for (hardware, tokens, preset), points in part.groupby(
                ["hardware", "tokens", "preset"], sort=True, dropna=False
            ):
                # a family's table is one hardware's and one preset's (its id says which)
                theirs = matrix.family == "synthetic" or f"/{slug(hardware)}/{preset}" in matrix.table_id
                if len(points) < 2 or not theirs:
                    continue
                count = "" if pd.isna(tokens) else f"{int(tokens)} tokens"
                # one file per table, hardware and shape: none overwrites another
                name = slug("-".join(x for x in (matrix.family, matrix.sweep, hardware, preset, count) if x))
                published = " (published by the docs)" if set(points["provenance"]) == {Provenance.PUBLISHED} else ""
                shared = "; " + ", ".join(w for w in matrix.shared if w != count) if matrix.shared else ""
                title = f"{matrix.family} {preset}{f', {count}' if count else ''} on {hardware}{published}{shared}"
                points = points.assign(label=_point_labels(points, _titled(points, matrix.shared)))
                path = draw(points, title, out_dir / f"{name}.png")
                plots.setdefault(matrix.table_id, []).append(path)
    return plots


@redrawn
def throughput_plot(table, path: Path) -> Path:
    """Samples/s against batch, a line per mode: where the batch stops paying."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for marker, (row, points) in zip(MARKERS * 4, table.points.groupby("row", sort=False)):
        ax.plot(points["batch"], points["samples_per_s"], marker=marker, label=row)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(table.points["batch"].unique()), [str(int(b)) for b in sorted(table.points["batch"].unique())])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("batch")
    ax.set_ylabel(f"{table.points['unit'].iloc[0]}/s")
    ax.set_title(table.title, fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


DIFF_BARS = 40  # a diff plot draws at most this many cells: those that changed most (the table lists all)


def diff_plot(diff: pd.DataFrame, label_a: str, label_b: str, path: Path) -> Path | None:
    """Time and memory of B over A per cell, side by side: red where B is slower (or larger). Of
    more than DIFF_BARS cells, the DIFF_BARS whose time or memory changed most, in the table's order."""
    both = diff.dropna(subset=["ratio"])
    if both.empty:
        return None
    cells = len(both)
    if cells > DIFF_BARS:
        change = np.maximum(np.log(both["ratio"]).abs(), np.log(both["memory_ratio"]).abs().fillna(0))
        both = both.iloc[np.sort(np.argsort(-change.to_numpy(), kind="stable")[:DIFF_BARS])]
    labels = [cell_name(r) for r in both.itertuples()]
    # the names' width beside two panels of about 3 inches; an inch of height kept for title and legend
    width, height = 6.5 + 0.078 * max(map(len, labels)), max(2.8, 0.3 * len(both) + 1)
    fig, (time_ax, memory_ax) = plt.subplots(1, 2, sharey=True, figsize=(width, height))
    for ax, column, what in ((time_ax, "ratio", "sec/step"), (memory_ax, "memory_ratio", "peak memory")):
        values = both[column]
        ax.barh(labels, values, color=["tab:red" if v > 1 else "tab:green" for v in values])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel(f"{what}: {label_b} / {label_a}")
    time_ax.set_ylim(len(both) - 0.5, -0.5)  # the first cell on top, no margin beyond the bars
    shown = "cell by cell" if cells == len(both) else f"the {len(both)} of {cells} cells that changed most"
    fig.suptitle(f"{label_b} vs {label_a}, {shown}", fontsize=11, y=1 - 0.15 / height, va="top")
    fig.legend(
        handles=[
            Patch(color="tab:red", label=f"{label_b} slower / larger"),
            Patch(color="tab:green", label=f"{label_b} faster / smaller"),
        ],
        loc="lower center",
        ncol=2,
        fontsize=8,
        bbox_to_anchor=(0.5, 0.0),
    )
    fig.tight_layout(rect=(0, 0.45 / height, 1, 1 - 0.4 / height))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plan_plot(outcome, path: Path) -> Path:
    """Every planned schedule's predicted peak against its predicted sec/step, the frontier drawn
    through, the budget as a line and the recommendation marked."""
    candidates = outcome.plan.candidates
    unit, size = unit_for(max(c.peak_bytes for c in candidates))
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ax.scatter([c.seconds for c in candidates], [c.peak_bytes / size for c in candidates], s=6, color="tab:gray",
               label="schedules (first k blocks of each pattern)")  # fmt: skip
    front = outcome.plan.frontier()
    ax.plot([c.seconds for c in front], [c.peak_bytes / size for c in front], color="tab:red", label="Pareto frontier")
    budget = outcome.request.budget_bytes / size
    ax.axhline(budget, color=CARD_COLOR, linestyle="--", linewidth=0.8)
    ax.text(0.995, budget, "budget", transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize=8,
            color=CARD_COLOR)  # fmt: skip
    chosen = outcome.recommended
    if chosen is not None:
        ax.scatter([chosen.seconds], [chosen.peak_bytes / size], s=60, color="tab:green", zorder=4,
                   label=f"recommended: {_short(chosen.config)}")  # fmt: skip
    ax.set_xlabel("predicted sec/step")
    ax.set_ylabel(f"predicted peak {unit}")
    request = outcome.request
    ax.set_title(f"{request.family} {request.preset} ({request.training}) on {request.card}: planned", fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    return _save(fig, path)


def _short(config) -> str:
    from ckptlib.planner import describe

    return describe(config)
