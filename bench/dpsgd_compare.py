#!/usr/bin/env python3
"""DP-SGD's per-example-gradient step in fjit, JAX and PyTorch, one core, interleaved rounds.

    python3 bench/dpsgd_compare.py [--build build] [--rounds 7] [--min-time 1.0]
                                   [--shapes 784-512-512-10:128,784-512-512-10:32]

The step: every example's gradient of the MLP's softmax cross entropy (ReLU hidden layers) by
vmap(grad(loss of one example)), the L2 norm of each example's whole gradient, clipping to
C = 1 (factor C / max(C, norm)), and the sum of the clipped gradients over the batch:
  fjit     bench/dpsgd_step (examples/lib/dp_sgd.h), a long-lived --serve worker;
  JAX      jax.jit of jax.vmap(jax.grad(loss)) and the same clip and sum, in this process;
  PyTorch  torch.func.vmap(torch.func.grad(loss)) and the same clip and sum, in this process
           (eager; torch.func has no jit of its own here).
Same shapes and dtypes (f32), parameters He-normal, inputs uniform. One core for every side
(step_rounds.setup_threads(1): this process and the worker pinned to CPU 0, one intra-op
thread each; torch.set_num_threads(1)); step time is CPU time (the process's for JAX and
PyTorch, the stepping thread's for fjit). Rounds alternate the order of the sides; a round's
ratio is fjit's median step time over the other's (below 1: fjit is faster), and each RESULT
line gives the median and range of the per-round ratios. Before timing, JAX's and PyTorch's
clipped sums are compared on the same inputs (a "RESULT check" line). A side whose framework
is not installed is skipped with a line saying so; with neither, the script exits 0.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import step_rounds


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--shapes", default="784-512-512-10:128,784-512-512-10:32")
    return ap.parse_args()


def inputs(sizes, batch):
    rng = np.random.default_rng(1)
    params = []
    for i in range(len(sizes) - 1):
        params.append(rng.normal(0, (2.0 / sizes[i]) ** 0.5, (sizes[i], sizes[i + 1])).astype(np.float32))
        params.append(np.zeros(sizes[i + 1], np.float32))
    x = rng.uniform(-1, 1, (batch, sizes[0])).astype(np.float32)
    y = (np.arange(batch) % sizes[-1]).astype(np.int32)
    return params, x, y


def timed(fn, steps, clock, warmup=1):
    out = []
    for i in range(warmup + steps):
        t0 = clock()
        fn()
        if i >= warmup:
            out.append((clock() - t0) * 1e6)
    return statistics.median(out)


def jax_side(params, x, y):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        print(f"dpsgd_compare: JAX is not installed ({e}); its column is skipped")
        return None, None

    def loss(p, xi, yi):
        h = xi[None, :]
        n = len(p) // 2
        for k in range(n):
            h = h @ p[2 * k] + p[2 * k + 1]
            if k < n - 1:
                h = jax.nn.relu(h)
        return -jax.nn.log_softmax(h)[0, yi]

    @jax.jit
    def step(p, xs, ys):
        g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(p, xs, ys)
        norms = jnp.sqrt(sum(jnp.sum(jnp.square(t).reshape(t.shape[0], -1), axis=1) for t in g))
        f = 1.0 / jnp.maximum(1.0, norms)
        return [jnp.tensordot(f, t, axes=1) for t in g]

    p = [jnp.asarray(t) for t in params]
    xs, ys = jnp.asarray(x), jnp.asarray(y)

    def run():
        out = step(p, xs, ys)
        out[-1].block_until_ready()
        return out

    side = step_rounds.InProcess("JAX", lambda n, wall: timed(run, n, time.process_time))
    return side, [np.asarray(t) for t in run()]


def torch_side(params, x, y):
    try:
        import torch
        from torch.func import grad, vmap
    except ImportError as e:
        print(f"dpsgd_compare: PyTorch is not installed ({e}); its column is skipped")
        return None, None
    torch.set_num_threads(1)

    def loss(p, xi, yi):
        h = xi.unsqueeze(0)
        n = len(p) // 2
        for k in range(n):
            h = h @ p[2 * k] + p[2 * k + 1]
            if k < n - 1:
                h = torch.relu(h)
        return torch.nn.functional.cross_entropy(h, yi.unsqueeze(0))

    p = [torch.from_numpy(t) for t in params]
    xs, ys = torch.from_numpy(x), torch.from_numpy(y).long()
    per_example = vmap(grad(loss), in_dims=(None, 0, 0))

    def run():
        with torch.no_grad():
            g = per_example(p, xs, ys)
            norms = torch.sqrt(sum(t.reshape(t.shape[0], -1).square().sum(1) for t in g))
            f = 1.0 / torch.clamp(norms, min=1.0)
            return [torch.tensordot(f, t, dims=1) for t in g]

    side = step_rounds.InProcess("PyTorch", lambda n, wall: timed(run, n, time.process_time))
    return side, [t.numpy() for t in run()]


def main():
    a = parse()
    step_rounds.setup_threads(1)
    exe = os.path.join(a.build, "bench", "dpsgd_step")
    if not os.path.exists(exe):
        print(f"dpsgd_compare: no {exe} (build the target dpsgd_step); skipped")
        return 0
    print(f"1 core, {a.rounds} rounds, at least {a.min_time} s of steps per side and round")
    for shape in a.shapes.split(","):
        layers, batch = shape.split(":")
        sizes = [int(v) for v in layers.split("-")]
        batch = int(batch)
        title = f"DP-SGD per-example grads + clip + sum, MLP {layers} b{batch}"
        params, x, y = inputs(sizes, batch)
        sides, values = [], {}
        for make in (jax_side, torch_side):
            side, value = make(params, x, y)
            if side is not None:
                sides.append(side)
                values[side.name] = value
        if not sides:
            print("dpsgd_compare: neither JAX nor PyTorch is there to compare with; skipped")
            return 0
        if len(values) == 2:
            diff = max(float(np.max(np.abs(u - v)) / (np.max(np.abs(v)) + 1e-30))
                       for u, v in zip(values["JAX"], values["PyTorch"]))
            print(f"RESULT check JAX vs PyTorch clipped sums, {title} | {diff:.1e} relative (max over leaves)")
        fjit = step_rounds.Worker("fjit", [exe, "--layers", ",".join(map(str, sizes)), "--batch", str(batch)])
        sides.insert(0, fjit)
        try:
            times, steps = step_rounds.interleaved(sides, a.rounds, a.min_time, wall=False)
        finally:
            fjit.close()
        for s in sides[1:]:
            print(step_rounds.ratio_line(title, "fjit", s.name, times, steps, 1, False))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
