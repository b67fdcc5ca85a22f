#!/usr/bin/env python3
"""Two builds of fjit's model_step, side by side: the new step's time over the old one's.

Each round runs both binaries (alternating which goes first) for the same steps on the same
cores and takes the ratio of that round's two times; the result is the median and range of the
per-round ratios, which a noisy machine moves far less than the times themselves.

  bench/step_ab.py OLD/bench/model_step build/bench/model_step --model cnn --rounds 7
"""
import argparse
import os
import re
import statistics
import subprocess


def step_us(binary, model, dtype, steps, threads):
    cores = "0" if threads == 1 else "0-1"
    env = dict(os.environ, FJIT_INTRA_OP_THREADS=str(threads))
    out = subprocess.run(["taskset", "-c", cores, binary, "--model", model, "--steps", str(steps),
                          "--warmup", "2", "--compute-dtype", dtype],
                         capture_output=True, text=True, env=env, check=True).stdout
    # One thread: the stepping thread's CPU time; more: the wall time (model_step.cc says why).
    key = "STEP_US" if threads == 1 else r"WALL_US"
    return float(re.search(key + r" ([0-9.]+)", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--threads", type=int, choices=(1, 2), default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    for dtype in a.dtypes.split(","):
        ratios, olds, news = [], [], []
        for r in range(a.rounds):
            first_old = r % 2 == 0
            t = {}
            for b in ((a.old, a.new) if first_old else (a.new, a.old)):
                t[b] = step_us(b, a.model, dtype, a.steps, a.threads)
            olds.append(t[a.old])
            news.append(t[a.new])
            ratios.append(t[a.new] / t[a.old])
        print(f"RESULT new/old {a.model} {dtype}, {a.threads} core(s) | {statistics.median(ratios):.2f}x "
              f"({min(ratios):.2f}-{max(ratios):.2f}) | old {statistics.median(olds) / 1000:.1f} ms, "
              f"new {statistics.median(news) / 1000:.1f} ms per step (medians of {a.rounds} rounds "
              f"in alternating order, {a.steps} steps each)")


if __name__ == "__main__":
    main()
