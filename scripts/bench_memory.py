"""Activation memory per mode on CPU (tracked live tensor bytes) against analytic floors.

    python scripts/bench_memory.py [--preset cpu-1024] [--training frozen]

Two figures per mode: bytes the forward leaves saved for backward, and the step's peak.
layer floor (the issue's): every block's boundary state + one block's saved activations; the
working-set floor adds one block's backward temporaries (its gradients), which any recompute pays.
torch-ffn: share of the feed-forward internals (what the FFN saves beyond its input) it frees.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import ckptlib
from ckptlib import CheckpointConfig, LiveTensorTracker, synthetic

MODES = {
    "none": CheckpointConfig("none"),
    "torch-ffn": CheckpointConfig("torch-ffn"),
    "unsloth-ffn": CheckpointConfig("unsloth-ffn"),
    "layer": CheckpointConfig("torch"),
    "unsloth": CheckpointConfig("unsloth"),
    "interval2": CheckpointConfig("torch", interval=2),
    "seg2-stride4": CheckpointConfig("torch", interval=2, stride=4),
}
MIB = 2**20


def saved_bytes(fn, x) -> int:
    """Bytes a forward leaves alive for backward, beyond its output."""
    with LiveTensorTracker() as tracker:
        out = fn(x)
        held = tracker.live_bytes - out.untyped_storage().nbytes()
    return held


def forward_backward_peak(fn, x) -> int:
    with LiveTensorTracker() as tracker:
        fn(x).backward(torch.ones_like(x))
    return tracker.peak_bytes


def measure(preset: str, training: str, config: CheckpointConfig) -> dict:
    work = synthetic.build(preset, training=training)
    handle = ckptlib.apply(work.model, config, work.spec)
    work.step()  # warm up: optimizer state and pool buffers exist before measuring
    with LiveTensorTracker() as tracker:
        loss = F.mse_loss(work.model(*work.args), work.target)
        saved = tracker.live_bytes
        loss.backward()
    return {"saved": saved, "peak": tracker.peak_bytes, "host": handle.report.pool.get("peak_held_bytes", 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu-1024")
    parser.add_argument("--training", default="frozen", choices=ckptlib.TRAINING_MODES)
    args = parser.parse_args()
    torch.set_num_threads(2)

    shape = synthetic.resolve_shape(args.preset)
    work = synthetic.build(args.preset, training=args.training)
    x = work.args[0].detach().requires_grad_()
    block = work.model.blocks[0]
    boundary = x.numel() * x.element_size()
    one_block_saved = saved_bytes(block, x)
    one_block_working_set = forward_backward_peak(block, x)
    ffn_internals = saved_bytes(block.ff, block.norm2(x).detach().requires_grad_())

    results = {name: measure(args.preset, args.training, config) for name, config in MODES.items()}
    print(f"preset {args.preset}: {shape}; training {args.training}; CPU, tracked live tensor bytes")
    print(
        f"per block: boundary state {boundary / MIB:.2f} MiB, saved {one_block_saved / MIB:.2f} MiB, "
        f"forward+backward working set {one_block_working_set / MIB:.2f} MiB, FFN internals {ffn_internals / MIB:.2f} MiB"
    )
    print(f"{'mode':14s} {'saved MiB':>10s} {'peak MiB':>10s} {'host MiB':>10s}")
    for name, r in results.items():
        print(f"{name:14s} {r['saved'] / MIB:10.2f} {r['peak'] / MIB:10.2f} {r['host'] / MIB:10.2f}")

    layer = results["layer"]
    floor = shape.depth * boundary + one_block_saved
    working_floor = shape.depth * boundary + one_block_working_set
    print(
        f"layer saved after forward: {layer['saved'] / MIB:.2f} MiB vs boundary states {shape.depth * boundary / MIB:.2f} MiB "
        f"(ratio {layer['saved'] / (shape.depth * boundary):.3f})"
    )
    print(
        f"layer peak: {layer['peak'] / MIB:.2f} MiB vs floor {floor / MIB:.2f} MiB (ratio {layer['peak'] / floor:.3f}); "
        f"vs working-set floor {working_floor / MIB:.2f} MiB (ratio {layer['peak'] / working_floor:.3f}; target <= 1.10)"
    )
    # The FFN checkpoint keeps its input (one boundary-sized tensor per block); that is not an internal.
    freed = results["none"]["saved"] - results["torch-ffn"]["saved"] + shape.depth * boundary
    print(
        f"torch-ffn frees {freed / MIB:.2f} MiB of {shape.depth * ffn_internals / MIB:.2f} MiB FFN internals "
        f"({100 * freed / (shape.depth * ffn_internals):.1f}%; target >= 90%)"
    )


if __name__ == "__main__":
    main()
