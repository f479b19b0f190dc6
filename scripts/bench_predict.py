"""How long a prediction takes at full size: the docs' shapes of Flux.1 dev, Wan 2.1 14B, Qwen Image
and SDXL (LoRA r16), each mode on the cuda device model, in this process.

    python scripts/bench_predict.py [--modes none layer unsloth] [--families flux1 wan qwen-image sdxl]

Prints seconds per prediction and the predicted peak with its split. The issue's target: under
30 s per prediction on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import resource
import time

import ckptlib
from ckptlib.families import builders, get
from ckptlib.predict import predict

GIB = 2**30
MODES = {
    "none": ckptlib.CheckpointConfig("none"),
    "layer": ckptlib.CheckpointConfig("torch"),
    "torch-ffn": ckptlib.CheckpointConfig("torch-ffn"),
    "unsloth": ckptlib.CheckpointConfig("unsloth"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", default=["flux1", "wan", "qwen-image", "sdxl"])
    parser.add_argument("--modes", nargs="+", default=["none", "layer", "unsloth"], choices=list(MODES))
    args = parser.parse_args()
    print(
        "| family | preset | mode | seconds | predicted peak GiB | parameters | activations | temporaries | host offload GiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.families:
        preset = get(name).default_preset
        for mode in args.modes:
            tic = time.perf_counter()
            p = predict(getattr(builders, name), MODES[mode], "cuda", preset=preset, training="lora")
            seconds = time.perf_counter() - tic
            split = " | ".join(f"{p.breakdown[c] / GIB:.2f}" for c in ("parameters", "activations", "temporaries"))
            print(
                f"| {name} | {preset} | {mode} | {seconds:.1f} | {p.peak_bytes / GIB:.2f} | {split} | "
                f"{p.host_offload_bytes / GIB:.2f} |",
                flush=True,
            )
    print(f"\nmax RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
