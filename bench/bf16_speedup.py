#!/usr/bin/env python3
"""fjit's bf16 step against its f32 step, per model: the speed-up of the bf16 policy.

    python3 bench/bf16_speedup.py [--build build] [--threads 1] [--models cnn,lm,vit,mlp-adam]
        [--rounds 5] [--min-time 1.0]

Issue 29's target (item 4): the CNN's and the language model's steps at least 1.6x faster in
bf16 than in f32, on a CPU with AVX512_BF16. Both sides are the same step program
(bench/model_step, bench/lm_step) kept running as workers, one with --compute-dtype f32 and one
with bf16, timed in interleaved rounds of alternating order (bench/step_rounds.py). Prints one
"RESULT f32/bf16 <model>" line per model: the median of the per-round f32/bf16 ratios and their
range; above 1 the bf16 step is faster. CPU time with one thread, wall time with two.
"""
import argparse
import statistics
import sys

import step_rounds
from jax_step import TITLES, fjit_argv

TARGETS = {"cnn": 1.6, "lm": 1.6}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1, choices=[1, 2])
    ap.add_argument("--models", default="cnn,lm,vit,mlp-adam")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of steps per side and round")
    a = ap.parse_args()
    step_rounds.setup_threads(a.threads)
    wall = a.threads > 1
    fresh = a.threads > 1  # step_rounds.Worker: idle workers' threads would spin
    print(f"{a.threads} core(s), {a.rounds} rounds, at least {a.min_time} s of steps per side and round")
    for name in a.models.split(","):
        sides = [step_rounds.Worker(dt, fjit_argv(a.build, name, dt), fresh) for dt in ("f32", "bf16")]
        try:
            times, steps = step_rounds.interleaved(sides, a.rounds, a.min_time, wall)
        finally:
            for s in sides:
                s.close()
        line = step_rounds.ratio_line(TITLES[name], "f32", "bf16", times, steps, a.threads, wall)
        if name in TARGETS:
            med = statistics.median(x / y for x, y in zip(times["f32"], times["bf16"]))
            line += f"; target >= {TARGETS[name]}x: {'met' if med >= TARGETS[name] else 'missed'}"
        print(line)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
