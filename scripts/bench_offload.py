"""What activation offload costs beyond its copies, on this machine.

    python scripts/bench_offload.py [--preset cpu-1024] [--rounds 7] [--steps 3] [--device cpu|cuda]

One process, paired runs: torch layer (the same checkpoint, nothing offloaded) and unsloth layer
(its saved inputs copied to host memory and back) take turns, `rounds` times `steps` steps each,
so a busy machine slows both alike. The copies themselves are timed apart: the same number of
tensors of the same sizes copied to a host buffer and back. What is left, unsloth - layer -
copies, is the offloader's bookkeeping (hooks, pool, counters); the target is at most 2% of a
step. On CUDA the copies overlap compute, so the figure there is unsloth vs layer itself (the
issue's target: within 2%), and the copy time exposed on the compute stream needs torch.profiler.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import ckptlib
from ckptlib import synthetic
from sweep.run.scenarios import timed_steps
from sweep.run.scenarios.devices import device_for


def copy_seconds(count: int, nbytes: int, device: str) -> float:
    """One step's worth of copies (`count` tensors of `nbytes`) to host memory and back, timed alone.
    (unsloth layer offloads each block's input: one size.)"""
    sources = [torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1) for _ in range(count)]
    hosts = [torch.empty(nbytes, dtype=torch.uint8, pin_memory=device.startswith("cuda")) for _ in range(count)]
    tic = time.perf_counter()
    for source, host in zip(sources, hosts):
        host.copy_(source)
        source.copy_(host)
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu-1024")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    works, handles = {}, {}
    for mode in ("layer", "unsloth"):
        work = synthetic.build(args.preset, training="lora", device=args.device)
        handles[mode] = ckptlib.apply(work.model, ckptlib.MODES[mode], work.spec)
        work.step()  # warm: optimizer state, pool buffers
        works[mode] = work
    device, samples = device_for(args.device), {mode: [] for mode in works}
    for _ in range(args.rounds):
        for mode, work in works.items():
            timed, _, _ = timed_steps(work.step, device, warmup_steps=0, steps=args.steps)
            samples[mode] += [seconds for seconds, _ in timed]
    offload = handles["unsloth"].report.offload
    count, moved = offload["tensors_offloaded"], offload["bytes_offloaded"]
    copies = statistics.median(copy_seconds(count, moved // max(count, 1), args.device) for _ in range(args.rounds))
    layer, unsloth = (statistics.median(samples[m]) for m in ("layer", "unsloth"))
    print(f"{args.preset} on {args.device}, {args.rounds} rounds x {args.steps} steps, paired in one process")
    print(f"torch layer    {layer:.4f} s/step (median)")
    print(f"unsloth layer  {unsloth:.4f} s/step (median): {unsloth / layer - 1:+.2%} vs layer")
    print(f"copies alone   {copies:.4f} s/step ({count} tensors, {moved / 2**20:.1f} MiB each way)")
    if not args.device.startswith("cuda"):
        print(f"bookkeeping    {(unsloth - layer - copies) / layer:+.2%} of a layer step (target: at most +2%)")


if __name__ == "__main__":
    main()
