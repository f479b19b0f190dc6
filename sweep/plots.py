"""Matplotlib figures for the reports: time vs memory per mode, and hardware diffs."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ckptlib.units import GIB  # noqa: E402

CARD_SIZES_GIB = (24, 48, 80, 141)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pareto_front(points: pd.DataFrame) -> pd.DataFrame:
    """Points no other point beats on both sec/step and peak GiB."""
    ordered = points.sort_values(["sec", "gib"])
    front, best_memory = [], float("inf")
    for row in ordered.itertuples():
        if row.gib < best_memory:
            front.append(row.Index)
            best_memory = row.gib
    return ordered.loc[front]


def tradeoff_plot(points: pd.DataFrame, title: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.scatter(points["sec"], points["gib"], color="tab:gray", zorder=2)
    for row in points.itertuples():
        ax.annotate(row.mode, (row.sec, row.gib), textcoords="offset points", xytext=(4, 4), fontsize=8)
    front = pareto_front(points)
    ax.plot(front["sec"], front["gib"], color="tab:red", marker="o", zorder=3, label="Pareto frontier")
    top = points["gib"].max()
    for size in CARD_SIZES_GIB:
        if size <= 2 * top:
            ax.axhline(size, color="tab:blue", linestyle="--", linewidth=0.8)
            ax.text(points["sec"].min(), size, f" {size} GiB card", va="bottom", fontsize=7, color="tab:blue")
    ax.set_xlabel("sec/step (median, post-warmup)")
    ax.set_ylabel("peak GiB")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    return _save(fig, path)


def memory_plot(points: pd.DataFrame, title: str, path: Path) -> Path:
    """Predicted peaks (no times) per mode, against card sizes."""
    fig, ax = plt.subplots(figsize=(6.5, max(2.5, 0.35 * len(points))))
    ax.barh(points["mode"], points["gib"], color="tab:gray")
    for size in CARD_SIZES_GIB:
        if size <= 1.2 * points["gib"].max():
            ax.axvline(size, color="tab:blue", linestyle="--", linewidth=0.8)
            ax.text(size, -0.6, f" {size} GiB", fontsize=7, color="tab:blue")
    ax.set_xlabel("predicted peak GiB")
    ax.set_title(title, fontsize=10)
    ax.invert_yaxis()
    return _save(fig, path)


def matrix_plots(cells: pd.DataFrame, matrices, out_dir: Path) -> dict[str, list[Path]]:
    """One plot per table, hardware and shape: time vs memory where cells were timed, predicted
    memory per mode where they were predicted."""
    plots: dict[str, list[Path]] = {}
    figures = cells[cells["peak_bytes"].notna()].assign(
        sec=lambda f: f["sec_per_step"], gib=lambda f: f["peak_bytes"] / GIB
    )
    timed = figures[(figures["status"] == "ok") & figures["sec"].notna()]
    predicted = figures[figures["provenance"] == "predicted"]
    for matrix in matrices:
        for frame, draw in ((timed, tradeoff_plot), (predicted, memory_plot)):
            part = frame[(frame["family"] == matrix.family) & (frame["run_name"] == matrix.sweep)]
            for (hardware, _, preset), points in part.groupby(
                ["hardware", "tokens", "preset"], sort=True, dropna=False
            ):
                if len(points) < 2 or (matrix.family != "synthetic" and not matrix.table_id.endswith(preset)):
                    continue
                name = "-".join(x for x in (matrix.family, matrix.sweep, hardware, preset) if x)
                name = "".join(c if c.isalnum() or c in "-." else "-" for c in name)
                path = draw(points, f"{matrix.family} {preset} on {hardware}", out_dir / f"{name}.png")
                plots.setdefault(matrix.table_id, []).append(path)
    return plots


def diff_plot(diff: pd.DataFrame, label_a: str, label_b: str, path: Path) -> Path | None:
    both = diff.dropna(subset=["ratio"])
    if both.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.28 * len(both))))
    labels = [f"{r.preset} {r.mode}" for r in both.itertuples()]
    ax.barh(labels, both["ratio"], color=["tab:red" if r > 1 else "tab:green" for r in both["ratio"]])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel(f"sec/step ratio {label_b} / {label_a}")
    ax.invert_yaxis()
    return _save(fig, path)
