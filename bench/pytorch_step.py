#!/usr/bin/env python3
"""PyTorch on CPU on the same two training steps as bench/train_step_bench.cc (optional).

    python3 bench/pytorch_step.py [--steps-large N] [--steps-small N] [--no-compile]
                                  [--compute-dtype f32|bf16]

Each step: relu MLP forward, softmax cross-entropy (mean), backward, and an SGD update
(lr 0.01) in f32, for 784-512-512-10 at batch 128 and 64-128-10 at batch 64, with one
intra-op thread (torch.set_num_threads(1)) as fjit runs one thread per replica. The eager
step is zero_grad + forward + backward + optimizer.step(), the usual training loop; the
figure is the median over many steps of the thread's CPU time (as train_step_bench's
interleaved mode measures fjit), with wall time next to it. torch.compile of the same step is
timed too when it compiles within --compile-budget seconds (it needs a C++ compiler).
--compute-dtype bf16 runs the forward pass and loss under torch.autocast("cpu", bfloat16)
(the products on bf16 operands; f32 parameters and optimizer), as fjit's bf16 policy.

Prints one `RESULT <name> | <value> | <note>` line per figure (bench/run_all.sh collects
them). When torch cannot be imported it says so and exits 0: the comparison is optional.
"""
import argparse
import statistics
import sys
import time

MODELS = [("MLP 784-512-512-10, batch 128", [784, 512, 512, 10], 128),
          ("MLP 64-128-10, batch 64", [64, 128, 10], 64)]
LR = 0.01


def build(torch, sizes, batch):
    torch.manual_seed(1)
    layers = []
    for k in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[k], sizes[k + 1]))
        if k + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    x = torch.rand(batch, sizes[0]) * 2 - 1
    # The same labels as train_step_bench: (i * 7) mod classes.
    y = (torch.arange(batch) * 7) % sizes[-1]
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()  # mean over the batch
    return model, x, y, opt, loss_fn


def eager_step(model, x, y, opt, loss_fn, bf16=False):
    opt.zero_grad(set_to_none=True)
    import torch
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):  # products in bf16
        loss = loss_fn(model(x).float(), y)
    loss.backward()
    opt.step()
    return loss


def time_steps(step, steps, warmup):
    for _ in range(warmup):
        step()
    cpu, wall = [], []
    for _ in range(steps):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        step()
        cpu.append(time.thread_time_ns() - c0)
        wall.append(time.perf_counter_ns() - w0)
    return statistics.median(cpu) / 1e3, statistics.median(wall) / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps-large", type=int, default=300)
    ap.add_argument("--steps-small", type=int, default=5000)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--compile-budget", type=float, default=120.0,
                    help="seconds torch.compile may take for both models before it is skipped")
    ap.add_argument("--compute-dtype", default="f32", choices=["f32", "bf16"],
                    help="bf16: the step under torch.autocast('cpu', bfloat16); f32 parameters")
    args = ap.parse_args()
    bf16 = args.compute_dtype == "bf16"
    tag = " bf16" if bf16 else ""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install (missing shared libraries)
        print(f"pytorch_step: torch is not importable ({type(e).__name__}: {e}); skipped")
        return 0
    torch.set_num_threads(1)
    print(f"pytorch_step: torch {torch.__version__}, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} intra-op thread, "
          f"median per-step times (thread CPU / wall)")
    compile_ok = not args.no_compile
    compile_spent = 0.0
    for title, sizes, batch in MODELS:
        steps = args.steps_large if sizes[0] == 784 else args.steps_small
        model, x, y, opt, loss_fn = build(torch, sizes, batch)
        cpu, wall = time_steps(lambda: eager_step(model, x, y, opt, loss_fn, bf16), steps, warmup=max(10, steps // 10))
        print(f"RESULT pytorch eager step{tag}, {title} | {cpu:.1f} us | wall {wall:.1f} us, "
              f"median of {steps} steps")
        if not compile_ok:
            continue
        model, x, y, opt, loss_fn = build(torch, sizes, batch)
        compiled = torch.compile(lambda: eager_step(model, x, y, opt, loss_fn, bf16))
        t0 = time.perf_counter()
        try:
            compiled()  # compiles forward, backward and the optimizer step
            compiled()
        except Exception as e:
            print(f"pytorch_step: torch.compile failed ({type(e).__name__}: {str(e)[:200]}); "
                  f"timing eager only")
            compile_ok = False
            continue
        compile_spent += time.perf_counter() - t0
        cpu, wall = time_steps(compiled, steps, warmup=max(10, steps // 10))
        print(f"RESULT pytorch torch.compile step{tag}, {title} | {cpu:.1f} us | wall {wall:.1f} us, "
              f"median of {steps} steps; compiling took {compile_spent:.0f} s so far")
        if compile_spent > args.compile_budget:
            print(f"pytorch_step: torch.compile took {compile_spent:.0f} s, over the "
                  f"{args.compile_budget:.0f} s budget; not compiling the next model")
            compile_ok = False
    return 0


if __name__ == "__main__":
    sys.exit(main())
