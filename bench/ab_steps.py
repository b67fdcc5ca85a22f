#!/usr/bin/env python3
"""Two builds of bench/model_step side by side: the cost of a change, as per-round ratios.

    python3 bench/ab_steps.py --a OLD/bench/model_step --b NEW/bench/model_step \
        [--models mlp-sgd,mlp-adam,cnn,vit] [--threads 1,2] [--rounds 7] [--steps 30]

For each model and intra-op thread count, runs A then B (then B then A in the next round, so
neither always goes first) for --rounds rounds, each a fresh process timing --steps steps
after warm-up. With 1 thread the figure is the stepping thread's CPU time, with more the
wall time (model_step prints both), and each run is pinned to that many cores with taskset
when there are enough. Prints per model the median B/A ratio of the rounds and its range:
below 1 means B is faster.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys


def one_run(exe, model, threads, steps):
    env = dict(os.environ, FJIT_INTRA_OP_THREADS=str(threads), FJIT_CHECKS="user")
    cmd = [exe, "--model", model, "--steps", str(steps)]
    cores = os.cpu_count() or 1
    if shutil.which("taskset") and cores >= threads:
        cmd = ["taskset", "-c", "0-%d" % (threads - 1)] + cmd
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("STEP_US"):
            fields = line.split()
            return float(fields[1]) if threads == 1 else float(fields[fields.index("WALL_US") + 1])
    raise RuntimeError("%s printed no STEP_US line:\n%s" % (exe, out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--models", default="mlp-sgd,mlp-adam,mlp-small,cnn,vit")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    print("| model | threads | A us | B us | B/A median | range |")
    print("|---|---|---|---|---|---|")
    for threads in [int(t) for t in args.threads.split(",")]:
        for model in args.models.split(","):
            a_times, b_times, ratios = [], [], []
            for r in range(args.rounds):
                order = [("a", args.a), ("b", args.b)]
                if r % 2:
                    order.reverse()
                got = {k: one_run(exe, model, threads, args.steps) for k, exe in order}
                a_times.append(got["a"])
                b_times.append(got["b"])
                ratios.append(got["b"] / got["a"])
            print("| %s | %d | %.0f | %.0f | %.3f | %.3f-%.3f |" % (
                model, threads, statistics.median(a_times), statistics.median(b_times),
                statistics.median(ratios), min(ratios), max(ratios)))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
