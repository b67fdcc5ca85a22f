#!/usr/bin/env python3
"""Reads a training run's --log-dir with TensorBoard's own reader and checks it against the
run's JSON lines (examples/tensorboard_test.sh runs it).

usage: check_tensorboard.py LOG_DIR
Exit 0: TensorBoard reads every scalar of scalars.jsonl, same steps, same values (as float32);
1: it does not; 77: TensorBoard is not installed (CTest counts the test as skipped).
"""
import json
import math
import os
import struct
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("tensorboard is not importable: skipped (pip install tensorboard to run this check)")
    sys.exit(77)


def as_float32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def main(log_dir):
    expected = {}
    with open(os.path.join(log_dir, "scalars.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            expected.setdefault(j["tag"], []).append((j["step"], j["value"]))
    acc = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    failures = []
    if tags != set(expected):
        failures.append(f"tags: TensorBoard {sorted(tags)}, JSON lines {sorted(expected)}")
    for tag in sorted(tags & set(expected)):
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        want = expected[tag]
        if [s for s, _ in got] != [s for s, _ in want]:
            failures.append(f"{tag}: steps {[s for s, _ in got]} != {[s for s, _ in want]}")
            continue
        for (step, g), (_, w) in zip(got, want):
            if w is None:
                if not math.isnan(g):
                    failures.append(f"{tag} at {step}: {g}, expected NaN")
            elif g != as_float32(w):
                failures.append(f"{tag} at {step}: {g} != {w}")
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"TensorBoard reads {sum(len(v) for v in expected.values())} scalars of "
              f"{len(expected)} tags, as the JSON lines have them")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
