"""Interleaved timing rounds, shared by bench/jax_step.py and bench/lm_compare.py.

A side is anything with a `name` and `time(steps, wall)` returning its median step time in
microseconds over `steps` steps: a C++ step program kept running as a worker (bench/model_step,
bench/lm_step, bench/libtorch_step with --serve: one process for every round, so neither
start-up nor compilation is timed and every round finds the same warm process; with more than
one intra-op thread a fresh process per round, see Worker), or a framework timed in this
process (JAX). `interleaved` gives each side enough steps to fill `min_seconds`,
then runs the rounds in alternating order (forward, then backward), so that no side always runs
first or always after the same neighbour; ratios are taken per round.
"""
import math
import os
import statistics
import subprocess


def setup_threads(threads):
    """Pins this process (and so its children) to CPUs 0..threads-1 with that many intra-op
    threads for fjit, XLA and OpenMP."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(range(threads)))
    os.environ["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} "
                               f"intra_op_parallelism_threads={threads}")
    os.environ["FJIT_INTRA_OP_THREADS"] = str(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


class Worker:
    """A step program in --serve mode: each request is a step count on its stdin, answered by
    one "STEP_US <median> <min> <max> WALL_US <median> ..." line. With `fresh`, a new process
    serves each request and exits: idle workers with more than one intra-op thread keep their
    OpenMP threads spinning for a while, which takes the cores from the side being timed."""

    def __init__(self, name, argv, fresh=False):
        self.name, self.argv, self.fresh, self.proc = name, argv, fresh, None
        if not fresh:
            self.proc = self._start()

    def _start(self):
        return subprocess.Popen(self.argv + ["--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)

    def time(self, steps, wall):
        proc = self._start() if self.fresh else self.proc
        proc.stdin.write(f"{steps}\n")
        proc.stdin.flush()
        if self.fresh:
            proc.stdin.close()
        try:
            for line in proc.stdout:
                if line.startswith("STEP_US"):
                    f = line.split()
                    return float(f[f.index("WALL_US") + 1]) if wall else float(f[1])
            raise RuntimeError(f"{self.name} worker ({' '.join(self.argv)}) exited with {proc.wait()}")
        finally:
            if self.fresh:
                proc.wait(timeout=600)

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


class InProcess:
    """A side timed in this process by fn(steps, wall) -> median microseconds."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def time(self, steps, wall):
        return self.fn(steps, wall)


def interleaved(sides, rounds, min_seconds, wall, min_steps=3):
    """Times every side `rounds` times; returns ({name: [median us per round]}, {name: steps})."""
    steps = {}
    for s in sides:  # warm-up and calibration
        t = s.time(min_steps, wall)
        steps[s.name] = max(min_steps, math.ceil(min_seconds * 1e6 / max(t, 1.0)))
    times = {s.name: [] for s in sides}
    for r in range(rounds):
        for s in sides if r % 2 == 0 else sides[::-1]:
            times[s.name].append(s.time(steps[s.name], wall))
    return times, steps


def ratio_line(title, ref, other, times, steps, threads, wall):
    """The RESULT line of ref/other: the median of the per-round ratios and their range."""
    ratios = [a / b for a, b in zip(times[ref], times[other])]
    return (f"RESULT {ref}/{other} {title}, {threads} core(s) | {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f}) | {ref} {statistics.median(times[ref]):.0f} us, "
            f"{other} {statistics.median(times[other]):.0f} us per step ({'wall' if wall else 'CPU'} "
            f"time; {len(ratios)} rounds in alternating order, {steps[ref]} and {steps[other]} steps)")
