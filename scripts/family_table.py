"""Per family: real-preset build time on the meta device and its size, the tiny preset's
forward+backward time on CPU, and which modes it supports.

    python scripts/family_table.py > /tmp/families.md
"""

from __future__ import annotations

import time

import torch

import ckptlib
from ckptlib import UnsupportedModeError
from ckptlib.families import all_families, build
from ckptlib.modes import MODES

# the modes beyond none a family may lack, by the docs' names (ckptlib.modes)
SHOWN = ("layer", "interval2", "seg2-stride4", "unsloth", "torch-ffn", "unsloth-ffn", "activation-offload")


def supported(name: str) -> list[str]:
    work = build(name, "tiny")
    found = []
    for mode in SHOWN:
        try:
            ckptlib.apply(work.model, MODES[mode], work.spec).remove()
            found.append(mode)
        except UnsupportedModeError:
            pass
    return found


def main() -> None:
    torch.set_num_threads(2)
    print("| family | class | real preset | params (B, meta) | meta build s | tiny fwd+bwd s | modes beyond none |")
    print("|---|---|---|---|---|---|---|")
    for name, family in sorted(all_families().items()):
        if family.unsupported:
            print(f"| {family.docs_name} | - | - | - | - | - | unsupported: no class |")
            continue
        preset = family.default_preset
        tic = time.perf_counter()
        model = family.build_meta(preset)
        build_s = time.perf_counter() - tic
        params = sum(p.numel() for p in model.parameters()) / 1e9
        work = build(name, "tiny", training="lora")
        work.step()  # first step pays one-off costs
        tic = time.perf_counter()
        work.step()
        step_s = time.perf_counter() - tic
        print(
            f"| {family.docs_name} | {family.cls} | {preset} | {params:.2f} | {build_s:.2f} | {step_s:.3f} | "
            f"{', '.join(supported(name))} |"
        )


if __name__ == "__main__":
    main()
