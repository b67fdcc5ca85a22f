#!/usr/bin/env python3
"""fjit beside JAX (CPU), LibTorch (C++) and PyTorch eager on the same training steps: interleaved ratios.

    python3 bench/jax_step.py [--build build] [--rounds 7] [--min-time 1.0] [--threads 1]
                              [--models mlp-sgd,mlp-adam,mlp-small,cnn,vit,lm]
                              [--frameworks jax,libtorch,torch] [--compute-dtype f32|bf16]

The models, batches and optimizers are those of bench/model_step.cc (fjit's side): the MLPs
784-512-512-10 (batch 128; SGD lr 0.01, and Adam) and 64-128-10 (batch 64, SGD), and the CNN
and ViT of examples/lib/models.h (batch 128, AdamW, dropout, u8 pixels cast inside the step),
written here in JAX with the same layers, shapes and dtypes; and the language model's step of
bench/lm_step.cc ("lm": decoder 6 layers d 384, batch 8 x 256, clipping, AdamW), JAX's being
bench/lm_compare.py's. LibTorch's side is bench/libtorch_step.cc, built only when CMake was
given a LibTorch (bench/libtorch.cmake); PyTorch eager's is bench/torch_side.py (the same
models in Python). Without libtorch_step, jax or torch, that column is skipped.

--compute-dtype bf16 runs fjit's steps with --compute-dtype bf16 (the layers' bf16 policy) and
JAX's with the same policy written out: bf16 operands into the dense and convolution products
(preferred_element_type f32), f32 parameters and optimizer state (the LM: bench/lm_compare.py's
bf16 mode). LibTorch (libtorch_step --compute-dtype bf16) and PyTorch run the forward under CPU
autocast to bf16, their users' way: f32 parameters, gradients and optimizer; autocast also puts
attention's products in bf16, which fjit's policy and JAX's here keep in f32.

fjit and LibTorch run as long-lived workers (--serve, bench/step_rounds.py) with one core, a
fresh process per round with two (idle workers' OpenMP threads would spin), JAX and PyTorch
in this process. Each side gets enough steps to fill --min-time seconds, and the rounds run the sides
in alternating order (fjit, JAX, LibTorch, PyTorch; then PyTorch, LibTorch, JAX, fjit; ...); a round's ratio is
fjit's median step time over the other's, and the result is the median and the range of the
per-round ratios (below 1: fjit is faster). Before timing, each LibTorch step is checked
against fjit's: both start from fjit's initial parameters and batch (model_step --check writes
them, libtorch_step --check loads them), dropout off, and the losses of their first three
steps are printed side by side (a "RESULT loss check" line; in bf16, both in bf16).

All sides get the same cores: `--threads 1` pins this process and its workers to CPU 0 with
one intra-op thread each (FJIT_INTRA_OP_THREADS=1; XLA with --xla_cpu_multi_thread_eigen=false
and intra_op_parallelism_threads=1; at::set_num_threads(1), torch.set_num_threads(1)), `--threads 2` to CPUs 0-1 with
two. Step time is CPU time with one core (this process's for JAX and PyTorch, the stepping thread's for
fjit and LibTorch: all count only the step's work) and wall time with two (CPU time would
count the other threads of some sides and not of others).

Prints `RESULT <name> | <value> | <note>` lines (bench/run_all.sh collects them). When none of
jax, libtorch_step and torch is there it says so and exits 0: the comparison is optional
(python3 -m venv .venv && .venv/bin/pip install "jax[cpu]" torch; then configure with
-DFJIT_LIBTORCH_DIR=$(.venv/bin/python -c "import torch, os; print(os.path.dirname(torch.__file__))")).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import step_rounds

MODELS = ["mlp-sgd", "mlp-adam", "mlp-small", "cnn", "vit", "lm"]
TITLES = {"mlp-sgd": "MLP 784-512-512-10 b128 SGD", "mlp-adam": "MLP 784-512-512-10 b128 Adam",
          "mlp-small": "MLP 64-128-10 b64 SGD", "cnn": "CNN b128 AdamW", "vit": "ViT b128 AdamW",
          "lm": "LM 6x384 b8x256 AdamW"}


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of steps per side and round")
    ap.add_argument("--threads", type=int, default=1, choices=[1, 2])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--frameworks", default="jax,libtorch,torch")
    ap.add_argument("--compute-dtype", default="f32", choices=["f32", "bf16"],
                    help="bf16: products on bf16 operands with f32 results, f32 parameters")
    return ap.parse_args()


def models(jax, jnp, bf16=False):
    lax = jax.lax

    # The products under fjit's bf16 policy (core/nn/precision.h): both operands rounded to bf16,
    # f32 result; parameters, attention's softmax products, norms and losses stay f32.
    def mm(x, w):
        if not bf16:
            return x @ w
        return jnp.matmul(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16),
                          preferred_element_type=jnp.float32)

    def dense(p, n, x):
        return mm(x, p[n + "/w"]) + p[n + "/b"]

    def dropout(x, rate, key):
        keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
        return jnp.where(keep, x / (1.0 - rate), 0.0)

    def images(x):
        return (x.astype(jnp.float32) / 255.0).reshape(x.shape[0], 28, 28, 1)

    def mlp(p, x, key):
        n = len(p) // 2
        for k in range(1, n + 1):
            x = mm(x, p[f"w{k}"]) + p[f"b{k}"]
            if k < n:
                x = jax.nn.relu(x)
        return x

    def conv(p, n, x):
        w = p[n + "/w"]
        if bf16:
            x, w = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     preferred_element_type=jnp.float32 if bf16 else None)
        return jax.nn.relu(y + p[n + "/b"])

    def pool(x, padding="VALID"):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), padding)

    def cnn(p, x, key):
        b = x.shape[0]
        h = pool(conv(p, "conv1", images(x)))
        h = pool(conv(p, "conv2", h))
        h = pool(conv(p, "conv3", h), "SAME")
        h = dropout(h.reshape(b, 4 * 4 * 128), 0.15, jax.random.fold_in(key, 1))
        h = dropout(jax.nn.relu(dense(p, "fc1", h)), 0.3, jax.random.fold_in(key, 2))
        return dense(p, "fc2", h)

    def layer_norm(x, g, b):
        m = x.mean(-1, keepdims=True)
        c = x - m
        return c * lax.rsqrt((c * c).mean(-1, keepdims=True) + 1e-5) * g + b

    def vit(p, x, key):
        b, t, d, heads = x.shape[0], 16, 64, 4
        cols = images(x).reshape(b, 4, 7, 4, 7).transpose(0, 1, 3, 2, 4).reshape(b * t, 49)
        h = dense(p, "embed", cols).reshape(b, t, d) + p["pos"]
        for k in range(4):
            n = f"block{k}"
            a = layer_norm(h, p[n + "/ln1/g"], p[n + "/ln1/b"]).reshape(b * t, d)
            qkv = dense(p, n + "/attn/qkv", a).reshape(b, t, 3, heads, d // heads)
            qkv = qkv.transpose(2, 0, 3, 1, 4)
            s = (qkv[0] @ qkv[1].swapaxes(-1, -2)) / (d // heads) ** 0.5
            mixed = (jax.nn.softmax(s, -1) @ qkv[2]).transpose(0, 2, 1, 3).reshape(b * t, d)
            a = dense(p, n + "/attn/out", mixed).reshape(b, t, d)
            h = h + dropout(a, 0.1, jax.random.fold_in(key, 10 * (k + 1)))
            m = layer_norm(h, p[n + "/ln2/g"], p[n + "/ln2/b"]).reshape(b * t, d)
            m = dense(p, n + "/mlp2", jax.nn.gelu(dense(p, n + "/mlp1", m), approximate=False))
            h = h + dropout(m.reshape(b, t, d), 0.1, jax.random.fold_in(key, 10 * (k + 1) + 1))
        h = layer_norm(h, p["ln/g"], p["ln/b"]).mean(1)
        return dense(p, "head", h)

    return {"mlp": mlp, "cnn": cnn, "vit": vit}


def init(jnp, np, name):
    rng = np.random.default_rng(1)
    p = {}

    def add(n, shape):
        fan_in = int(np.prod(shape[:-1]))
        p[n + "/w"] = jnp.asarray(rng.normal(0, (2.0 / fan_in) ** 0.5, shape), jnp.float32)
        p[n + "/b"] = jnp.zeros(shape[-1], jnp.float32)

    if name.startswith("mlp"):
        sizes = [64, 128, 10] if name == "mlp-small" else [784, 512, 512, 10]
        for k in range(1, len(sizes)):
            p[f"w{k}"] = jnp.asarray(rng.normal(0, (2.0 / sizes[k - 1]) ** 0.5,
                                                (sizes[k - 1], sizes[k])), jnp.float32)
            p[f"b{k}"] = jnp.zeros(sizes[k], jnp.float32)
    elif name == "cnn":
        add("conv1", (3, 3, 1, 32)), add("conv2", (3, 3, 32, 64)), add("conv3", (3, 3, 64, 128))
        add("fc1", (4 * 4 * 128, 128)), add("fc2", (128, 10))
    else:
        add("embed", (49, 64))
        p["pos"] = jnp.asarray(rng.normal(0, 0.1, (16, 64)), jnp.float32)
        for k in range(4):
            n = f"block{k}"
            for ln in ("ln1", "ln2"):
                p[f"{n}/{ln}/g"], p[f"{n}/{ln}/b"] = jnp.ones(64, jnp.float32), jnp.zeros(64, jnp.float32)
            add(n + "/attn/qkv", (64, 192)), add(n + "/attn/out", (64, 64))
            add(n + "/mlp1", (64, 128)), add(n + "/mlp2", (128, 64))
        p["ln/g"], p["ln/b"] = jnp.ones(64, jnp.float32), jnp.zeros(64, jnp.float32)
        add("head", (64, 10))
    return p


def make_step(jax, jnp, np, name, bf16=False):
    fwd = models(jax, jnp, bf16)["mlp" if name.startswith("mlp") else name]
    opt = "sgd" if name in ("mlp-sgd", "mlp-small") else "adam" if name == "mlp-adam" else "adamw"
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 1e-3

    def loss_fn(p, x, y, key):
        logp = jax.nn.log_softmax(fwd(p, x, key))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], 1))

    def step(p, s, x, y, key):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y, key)
        if opt == "sgd":
            return jax.tree_util.tree_map(lambda w, d: w - 0.01 * d, p, g), s, loss
        t = s["t"] + 1.0
        m = jax.tree_util.tree_map(lambda m, d: b1 * m + (1 - b1) * d, s["m"], g)
        v = jax.tree_util.tree_map(lambda v, d: b2 * v + (1 - b2) * d * d, s["v"], g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        decay = 1 - lr * 1e-2 if opt == "adamw" else 1.0
        p = jax.tree_util.tree_map(
            lambda w, m, v: w * decay - (lr / c1) * m / (jnp.sqrt(v) / jnp.sqrt(c2) + eps), p, m, v)
        return p, {"t": t, "m": m, "v": v}, loss

    p = init(jnp, np, name)
    s = {} if opt == "sgd" else {"t": jnp.zeros((), jnp.float32),
                                 "m": jax.tree_util.tree_map(jnp.zeros_like, p),
                                 "v": jax.tree_util.tree_map(jnp.zeros_like, p)}
    batch, feats = (64, 64) if name == "mlp-small" else (128, 784)
    if name.startswith("mlp"):
        x = jnp.asarray(np.random.default_rng(3).uniform(-1, 1, (batch, feats)), jnp.float32)
    else:
        x = jnp.asarray((np.arange(batch * feats) * 37) % 256, jnp.uint8).reshape(batch, feats)
    y = jnp.asarray((np.arange(batch) * 7) % 10, jnp.int32)
    return jax.jit(step, donate_argnums=(0, 1)), [p, s, x, y, jax.random.PRNGKey(7)]


def time_jax(step, args, steps, warmup=1, wall=False):
    clock = time.perf_counter if wall else time.process_time
    p, s, x, y, key = args
    out = []
    for i in range(warmup + steps):
        t0 = clock()
        p, s, loss = step(p, s, x, y, key)
        loss.block_until_ready()
        if i >= warmup:
            out.append((clock() - t0) * 1e6)
    args[0], args[1] = p, s
    return statistics.median(out)


def jax_side(name, bf16=False):
    """JAX's step for `name` as a side of the rounds, or None when jax cannot be imported."""
    try:
        import jax
        import jax.numpy as jnp
        import numpy as np
    except ImportError as e:
        print(f"jax_step: JAX is not installed ({e}); its column is skipped")
        return None
    if name == "lm":
        import lm_compare
        lm = lm_compare.JaxSide(bf16)
        return step_rounds.InProcess("JAX", lambda n, wall: lm.train(n, time.perf_counter if wall else time.process_time))
    step, args = make_step(jax, jnp, np, name, bf16)
    return step_rounds.InProcess("JAX", lambda n, wall: time_jax(step, args, n, wall=wall))


def fjit_argv(build, name, dtype="f32"):
    if name == "lm":
        return [os.path.join(build, "bench", "lm_step"), "--warmup", "1", "--compute-dtype", dtype]
    return [os.path.join(build, "bench", "model_step"), "--model", name, "--warmup", "1",
            "--compute-dtype", dtype]


def torch_side(name, threads, bf16):
    """PyTorch eager's step for `name` (bench/torch_side.py), or None when torch cannot be imported."""
    try:
        import torch_side as ts
        fn, version = ts.torch_side(name, threads, bf16)
    except ImportError as e:
        print(f"jax_step: PyTorch is not installed ({e}); its column is skipped")
        return None
    return step_rounds.InProcess("PyTorch", fn), version


def check_losses(build, name, libtorch, dtype):
    """Both steps from fjit's initial parameters and batch, dropout off: their first losses."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "start.bin")
        out, version = [], ""
        for argv in (fjit_argv(build, name, dtype), [libtorch, "--model", name, "--compute-dtype", dtype]):
            r = subprocess.run(argv + ["--check", path], capture_output=True, text=True, check=True)
            line = next(l for l in r.stdout.splitlines() if l.startswith("LOSSES"))
            out.append([float(v) for v in line.split()[1:4]])
            version = line[line.find("(LibTorch") + 1:].split(",")[0] if "(LibTorch" in line else version
    diff = max(abs(a - b) / abs(a) for a, b in zip(*out))
    print(f"RESULT loss check fjit vs LibTorch, {TITLES[name]}{' bf16' if dtype == 'bf16' else ''} | {diff:.1e} relative | first three losses "
          f"from fjit's start, dropout off: fjit {' '.join(f'{v:.6f}' for v in out[0])}, "
          f"{version} {' '.join(f'{v:.6f}' for v in out[1])}")


def main():
    a = parse()
    step_rounds.setup_threads(a.threads)
    frameworks = a.frameworks.split(",")
    libtorch = os.path.join(a.build, "bench", "libtorch_step")
    if "libtorch" in frameworks and not os.path.exists(libtorch):
        print(f"jax_step: no {libtorch} (configure with -DFJIT_LIBTORCH_DIR, bench/libtorch.cmake); "
              "the LibTorch column is skipped")
        frameworks.remove("libtorch")
    wall = a.threads > 1
    bf16 = a.compute_dtype == "bf16"
    print(f"{a.threads} core(s), {a.rounds} rounds, at least {a.min_time} s of steps per side and round; "
          f"frameworks: {', '.join(frameworks) or 'none'}; compute dtype {a.compute_dtype}")
    for name in a.models.split(","):
        if "libtorch" in frameworks:
            check_losses(a.build, name, libtorch, a.compute_dtype)
        fresh = a.threads > 1  # step_rounds.Worker: idle workers' threads would spin
        sides = [step_rounds.Worker("fjit", fjit_argv(a.build, name, a.compute_dtype), fresh)]
        if "jax" in frameworks:
            side = jax_side(name, bf16)
            if side is None:
                frameworks.remove("jax")
            else:
                sides.append(side)
        if "libtorch" in frameworks:
            sides.append(step_rounds.Worker("LibTorch", [libtorch, "--model", name, "--warmup", "1",
                                                         "--threads", str(a.threads), "--compute-dtype",
                                                         a.compute_dtype], fresh))
        if "torch" in frameworks:
            side = torch_side(name, a.threads, bf16)
            if side is None:
                frameworks.remove("torch")
            else:
                sides.append(side[0])
                if name == a.models.split(",")[0]:
                    print(f"PyTorch {side[1]}")
        if len(sides) == 1:
            sides[0].close()
            print("jax_step: neither JAX, LibTorch nor PyTorch is there to compare with; skipped")
            return 0
        try:
            times, steps = step_rounds.interleaved(sides, a.rounds, a.min_time, wall)
        finally:
            for s in sides:
                if isinstance(s, step_rounds.Worker):
                    s.close()
        for s in sides[1:]:
            print(step_rounds.ratio_line(TITLES[name] + (" bf16" if bf16 else ""), "fjit", s.name, times, steps, a.threads, wall))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
