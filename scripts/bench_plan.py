"""The planner's benchmark (issue: plan).

1. Planning time on the docs' big families at their docs shapes (CUDA device model, LoRA): the
   schedules evaluated, the shallow predictions they took, and the extrapolation checked against
   full predictions for a few candidates (the recommendation for the card, a cut inside a list, a
   strided pattern on every block).
2. On this CPU: the planner's pick for a budget against the docs' modes that fit, and the Spearman
   rank correlation of predicted and measured sec/step over schedules spread across the frontier,
   with the assumed step-time model and with one fitted to the docs modes' cells; every cell is
   measured in `--rounds` runs, the order reversed every other run, and its median taken. Models:
   the synthetic block and two real classes (`--cpu`).

    python scripts/bench_plan.py --out reports/bench-plan.md
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from ckptlib import MODES
from ckptlib.extrapolate import ShallowPredictor
from ckptlib.planner import Candidate, describe, fit_throughput, plan_schedules
from ckptlib.units import GIB, MIB
from sweep.config.builders import import_builder
from sweep.config.structured import builtin_builder
from sweep.plan.planning import Request, assumed_throughput, make_plan, schedule_key
from sweep.plan.verify import docs_modes_beside, measure_rounds
from sweep.vocabulary import Status

FAMILIES = ("flux1:dev", "wan:t2v-14b", "qwen-image:qwen-image", "flux1:dev:int8-torchao")
# The synthetic block at the budget of earlier runs, and two real classes (Flux's two block lists,
# Wan's one) at shapes whose CPU step takes a few tenths of a second: a tiny shape's step is its
# Python overhead, which no FLOPs model predicts.
CPU_CASES = ("synthetic:cpu-1024@60", "flux1:tiny:768x768", "wan:tiny:384x384x9")


def plan_family(family: str, preset: str, quantization: str, vram_gib: float, workers: int) -> dict:
    started = time.perf_counter()
    build = import_builder(f"ckptlib.families.builders.{family}")
    predictor = ShallowPredictor(build, "cuda", preset=preset, training="lora", quantization=quantization)
    built = time.perf_counter()
    plan = plan_schedules(predictor, assumed_throughput("cuda", "pcie5"), workers=workers)
    planned = time.perf_counter()
    budget = int(vram_gib * GIB * 0.9)
    fitting = plan.fitting(budget)
    checks = [fitting[0]] if fitting else []
    inside = [c for c in plan.frontier() if c.interpolated]
    checks += inside[len(inside) // 2 : len(inside) // 2 + 1]
    checks += [c for c in plan.candidates if c.config.stride and c.config.blocks is None][:1]
    errors = []
    for candidate in checks:
        full = predictor.full(candidate.config)
        errors.append(
            {
                "schedule": describe(candidate.config),
                "estimate_gib": candidate.peak_bytes / GIB,
                "full_gib": full.peak_bytes / GIB,
                "error": candidate.peak_bytes / full.peak_bytes - 1,
                "flops_error": candidate.estimate.flops / full.flops - 1,
            }
        )
    return {
        "family": family,
        "preset": preset,
        "quantization": quantization,
        "build_s": built - started,
        "plan_s": planned - built,
        "candidates": len(plan.candidates),
        "predictions": plan.predictions,
        "recommended": describe(fitting[0].config) if fitting else None,
        "smallest": describe(plan.smallest().config),
        "smallest_gib": plan.smallest().peak_bytes / GIB,
        "checks": errors,
    }


def spread(frontier: list[Candidate], count: int) -> list[Candidate]:
    """`count` schedules of the frontier evenly spaced in predicted sec/step, its fastest and its
    slowest included: neighbours on the frontier differ by less than a CPU step's noise, so a rank
    correlation over them measures the noise, not the model."""
    by_time = sorted(frontier, key=lambda c: c.seconds)
    low, high = by_time[0].seconds, by_time[-1].seconds
    picked: list[Candidate] = []
    for rank in range(min(count, len(by_time))):
        goal = low + (high - low) * rank / max(count - 1, 1)
        nearest = min((c for c in by_time if c not in picked), key=lambda c: abs(c.seconds - goal))
        picked.append(nearest)
    return sorted(picked, key=lambda c: c.peak_bytes)


def cpu_case(text: str) -> tuple[str, str, dict[str, int], float | None]:
    """'family:preset[:HxW[xF]][@MiB]' -> family, preset, shape, budget (None: halfway)."""
    text, _, budget = text.partition("@")
    family, preset, *size = text.split(":")
    shape = {}
    if size:
        numbers = [int(n) for n in size[0].split("x")]
        shape = dict(zip(("height", "width", "frames"), numbers))
    return family, preset, shape, float(budget) if budget else None


def cpu_study(case: str, frontier_cells: int, steps: int, rounds: int) -> dict:
    """The pick for a budget against the fastest docs mode that fits, all measured on this CPU in
    `rounds` runs, the order reversed every other run (NOTE [ Verdicts above the noise ]). Without a
    budget in `case`, it is halfway between no checkpointing's predicted peak and the smallest's, as
    in the issue's own model: some docs modes fit, some do not."""
    family, preset, shape, budget_mib = cpu_case(case)
    request = Request(family, builtin_builder(family), preset, 2**50, "any", device="cpu", shape=shape)
    outcome = make_plan(request, None)
    if budget_mib is None:
        none = next(c for c in outcome.plan.candidates if not c.config.checkpoints)
        budget_mib = round((none.peak_bytes + outcome.plan.smallest().peak_bytes) / 2 / MIB, 1)
    request = replace(request, card_bytes=int(budget_mib * MIB), card=f"{budget_mib} MiB")
    fitting = outcome.plan.fitting(request.budget_bytes)
    front = spread(outcome.plan.frontier(), frontier_cells)
    chosen = [fitting[0], *[c for c in front if c is not fitting[0]]]
    docs = docs_modes_beside(fitting, chosen)
    with tempfile.TemporaryDirectory() as folder:
        measured = measure_rounds(request, chosen, docs, f"sqlite:///{folder}/bench.db", "bench-plan", steps, 3, rounds)
    ok = {name: timing for name, timing in measured.items() if timing.status == Status.OK}
    rows = []
    for rank, candidate in enumerate(chosen, 1):
        if f"plan-{rank}" in ok:
            timing = ok[f"plan-{rank}"]
            rows.append({"schedule": describe(candidate.config), "predicted_s": candidate.seconds,
                         "measured_s": timing.seconds, "noise_s": timing.noise,
                         "peak_mib": timing.peak_bytes / MIB, "estimate": candidate.estimate})  # fmt: skip
    by_key = {schedule_key(c.config): c.estimate for c in outcome.plan.candidates}
    docs_cells = [(by_key[schedule_key(MODES[d])], ok[d].seconds) for d in docs if d in ok]
    fitted = fit_throughput(docs_cells, False, "fitted to the docs modes") if len(docs_cells) >= 2 else None
    frame = pd.DataFrame(rows)
    if fitted is not None:
        frame["calibrated_s"] = [fitted.step_seconds(e) for e in frame["estimate"]]
    fits_docs = {d: ok[d] for d in docs if d in ok and ok[d].peak_bytes <= request.budget_bytes}
    best = min(fits_docs, key=lambda d: fits_docs[d].seconds) if fits_docs else None
    pick = frame.iloc[0]
    pick_timing = ok["plan-1"]
    return {
        "family": family,
        "preset": preset,
        "shape": "x".join(str(v) for v in shape.values()) or "preset's",
        "budget_mib": budget_mib,
        "pick": pick["schedule"],
        "pick_s": pick["measured_s"],
        "pick_noise_s": pick["noise_s"],
        "pick_peak_mib": pick["peak_mib"],
        "best_docs": best,
        "best_docs_s": fits_docs[best].seconds if best else None,
        "best_docs_noise_s": fits_docs[best].noise if best else None,
        "ratio": pick["measured_s"] / fits_docs[best].seconds if best else None,
        "apart": pick_timing.apart_from(fits_docs[best]) if best else None,
        "spearman_assumed": frame["predicted_s"].corr(frame["measured_s"], method="spearman"),
        "spearman_calibrated": frame["calibrated_s"].corr(frame["measured_s"], method="spearman") if fitted else None,
        "frontier_measured": len(frame),
        "steps": steps,
        "rounds": rounds,
        "rows": frame.drop(columns="estimate").to_dict("records"),
    }


def markdown(families: list[dict], cpu: list[dict]) -> str:
    lines = [
        "# Planner benchmark",
        "",
        "Produced by `python scripts/bench_plan.py` (2-core CPU, CUDA device model).",
        "",
    ]
    lines += ["| family | preset | base | build s | plan s | schedules | shallow predictions | smallest peak GiB | recommended (24 GiB) |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for f in families:
        lines.append(f"| {f['family']} | {f['preset']} | {f['quantization']} | {f['build_s']:.1f} | {f['plan_s']:.1f} | "
                     f"{f['candidates']} | {f['predictions']} | {f['smallest_gib']:.2f} ({f['smallest']}) | {f['recommended']} |")  # fmt: skip
    lines += [
        "",
        "Extrapolated against full predictions:",
        "",
        "| family | schedule | estimate GiB | full GiB | peak error | FLOPs error |",
        "|---|---|---|---|---|---|",
    ]
    for f in families:
        for c in f["checks"]:
            lines.append(f"| {f['family']} | {c['schedule']} | {c['estimate_gib']:.3f} | {c['full_gib']:.3f} | "
                         f"{c['error']:+.2%} | {c['flops_error']:+.2%} |")  # fmt: skip
    if cpu:
        lines += ["", "On this CPU: the pick for a budget against the fastest docs mode that fits, each schedule measured "
                  "in rounds, the order reversed every other round (NOTE [ Verdicts above the noise ] in "
                  "sweep/plan/verify.py); Spearman: predicted against measured sec/step over schedules spread along "
                  "the frontier, with the assumed step-time model and with one fitted to the docs modes' cells.", "",
                  "| model | shape | budget MiB | pick | pick s/step (noise) | fastest docs mode that fits | its s/step (noise) | pick / docs | apart | Spearman assumed / fitted | rounds x steps |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for c in cpu:
            ratio = f"{c['ratio']:.3f}" if c["ratio"] else "-"
            apart = {True: "beyond the noise", False: "within the noise", None: "-"}[c["apart"]]
            fitted = f"{c['spearman_calibrated']:.2f}" if c["spearman_calibrated"] is not None else "-"
            docs = f"{c['best_docs_s']:.4f} ({c['best_docs_noise_s']:.4f})" if c["best_docs"] else "-"
            lines.append(f"| {c['family']} {c['preset']} | {c['shape']} | {c['budget_mib']} | {c['pick']} | "
                         f"{c['pick_s']:.4f} ({c['pick_noise_s']:.4f}) | {c['best_docs'] or 'none fits'} | {docs} | "
                         f"{ratio} | {apart} | {c['spearman_assumed']:.2f} / {fitted} | {c['rounds']} x {c['steps']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), help="family:preset ...")
    parser.add_argument("--vram", type=float, default=24, help="card GiB for the recommendation")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--cpu", nargs="*", default=list(CPU_CASES), help="family:preset[:HxW[xF]][@MiB] measured on this CPU"
    )
    parser.add_argument("--frontier-cells", type=int, default=7, help="frontier schedules measured, spread in time")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per measured cell")
    parser.add_argument("--rounds", type=int, default=3, help="measured runs of every cell; each cell's median")
    parser.add_argument("--no-cpu", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("reports/bench-plan.md"))
    options = parser.parse_args()
    families = []
    for entry in options.families:
        family, preset, quantization = (entry.split(":") + ["none"])[:3]
        families.append(plan_family(family, preset, quantization, options.vram, options.workers))
        print(json.dumps(families[-1], default=str), flush=True)
    cpu = []
    for case in [] if options.no_cpu else options.cpu:
        cpu.append(cpu_study(case, options.frontier_cells, options.steps, options.rounds))
        print(json.dumps({k: v for k, v in cpu[-1].items() if k != "rows"}, default=str), flush=True)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(markdown(families, cpu))
    options.out.with_suffix(".json").write_text(json.dumps({"families": families, "cpu": cpu}, indent=1, default=str))
    print(options.out)


if __name__ == "__main__":
    main()
