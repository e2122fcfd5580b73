"""The timing both Betty scripts of bench/peers share: a built Betty engine stepped by hand."""

import time

import torch


def time_steps(engine, warmup, steps, device):
    """Takes `warmup` global steps of `engine`, then times `steps` more (on CUDA after the
    queued work is done) and prints the line compare.py reads: "ms_per_step=<x> steps=<n>"."""
    engine.train()

    def run(n):
        for _ in range(n):
            engine.global_step += 1
            engine.train_step()

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    run(warmup)
    synchronize()
    start = time.perf_counter()
    run(steps)
    synchronize()
    elapsed = time.perf_counter() - start
    print(f"ms_per_step={1000.0 * elapsed / steps:.4f} steps={steps}")
