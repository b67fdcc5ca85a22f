#!/usr/bin/env python3
"""fjit beside JAX and PyTorch (eager) on the language model's training and decode steps.

    python3 bench/lm_compare.py [--build build] [--rounds 5] [--steps 3] [--threads 1|2]
                                [--frameworks jax,torch] [--decode-tokens 64] [--small]
                                [--compute-dtype f32|bf16] [--losses N]

The model is train_lm's (core/nn/decoder.h): a GPT-style decoder, 6 layers, d 384, 6 heads,
context 256, vocab 256, learned positions, pre-norm layer norm, exact GELU MLP of width 4d,
tied embeddings. The training step is the mean next-token cross entropy of a batch of 8
sequences, its gradient, clipping to global norm 1 and AdamW (lr 1e-3, b2 0.95, weight decay
0.1), written the way each framework's users write it: JAX with jax.jit, value_and_grad and
jax.nn.dot_product_attention; PyTorch eager with nn.Module, F.scaled_dot_product_attention
(is_causal), clip_grad_norm_ and torch.optim.AdamW. The decode step generates one token at
batch 1 with a KV cache (temperature 0.8, top-k 40): JAX as one jitted step of fixed shape
(the cache updated with dynamic_update_slice), PyTorch eager under no_grad with a cache that
grows. fjit's half is bench/lm_step (started once per round).

--compute-dtype bf16 times the training steps in bf16 compute with f32 accumulation, the policy
of fjit's lm_step --compute-dtype bf16 (core/nn/precision.h): JAX with bf16 operands into the
dense products and the tied head (preferred_element_type f32), attention, norms, loss, parameters
and AdamW in f32, as bench/jax_step.py's bf16 mode; PyTorch with the forward under
torch.autocast("cpu", torch.bfloat16) (which also runs attention in bf16), the loss in f32.
Decode steps stay f32 on every side. --losses N prints the losses of each framework's first N
training steps (from the same initial parameters: "LOSSES <framework> <dtype> <l1> ...") and
exits, to compare the bf16 runs with the f32 ones.

Each round times fjit, then each framework, `--steps` steps each after warm-up, and the ratio
of the medians is the round's figure; printed is the median ratio with its range over the
rounds (below 1: fjit is faster). Decode steps are timed in wall time. Training, one core: CPU time (this process for JAX and PyTorch, the
stepping thread for fjit), everyone pinned to CPU 0 with one intra-op thread. Two cores: wall
time, CPUs 0-1, two intra-op threads each.

Prints `RESULT <name> | <value> | <note>` lines. A framework that cannot be imported is
skipped with a line saying so (the comparison is optional:
python3 -m venv .venv && .venv/bin/pip install "jax[cpu]" torch).
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import time

from step_rounds import setup_threads

L, D, H, T, V, B = 6, 384, 6, 256, 256, 8


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, choices=[1, 2])
    ap.add_argument("--frameworks", default="jax,torch")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--small", action="store_true", help="a 2-layer d 128 model (a quick check)")
    ap.add_argument("--compute-dtype", default="f32", choices=["f32", "bf16"],
                    help="bf16: the training steps' products on bf16 operands with f32 results")
    ap.add_argument("--losses", type=int, default=0, help="print each framework's first N losses and exit")
    return ap.parse_args()


def init_numpy(np, seed=1):
    """GPT-2's initialization as numpy arrays, shared by the JAX and PyTorch models."""
    rng = np.random.default_rng(seed)
    p = {"tok": rng.normal(0, 0.02, (V, D)), "pos": rng.normal(0, 0.02, (T, D))}
    res = 0.02 / math.sqrt(2 * L)
    for i in range(L):
        p.update({f"{i}.ln1.g": np.ones(D), f"{i}.ln1.b": np.zeros(D),
                  f"{i}.qkv.w": rng.normal(0, 0.02, (D, 3 * D)), f"{i}.qkv.b": np.zeros(3 * D),
                  f"{i}.out.w": rng.normal(0, res, (D, D)), f"{i}.out.b": np.zeros(D),
                  f"{i}.ln2.g": np.ones(D), f"{i}.ln2.b": np.zeros(D),
                  f"{i}.fc.w": rng.normal(0, 0.02, (D, 4 * D)), f"{i}.fc.b": np.zeros(4 * D),
                  f"{i}.proj.w": rng.normal(0, res, (4 * D, D)), f"{i}.proj.b": np.zeros(D)})
    p.update({"lnf.g": np.ones(D), "lnf.b": np.zeros(D)})
    return {k: v.astype(np.float32) for k, v in p.items()}


def batch_numpy(np):
    i = np.arange(B * T)
    return ((i * 37 + 11) % V).reshape(B, T).astype(np.int32), ((i * 37 + 48) % V).reshape(B, T).astype(np.int32)


# ---------------------------------------------------------------- JAX
def jax_model(jax, jnp, bf16=False):
    def mm(x, w):  # a dense product; under bf16, bf16 operands and an f32 result
        if not bf16:
            return x @ w
        return jnp.matmul(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32)

    def ln(x, g, b):
        m = jnp.mean(x, -1, keepdims=True)
        v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b

    def block(p, i, x, attend):
        h = ln(x, p[f"{i}.ln1.g"], p[f"{i}.ln1.b"])
        qkv = mm(h, p[f"{i}.qkv.w"]) + p[f"{i}.qkv.b"]
        x = x + mm(attend(qkv), p[f"{i}.out.w"]) + p[f"{i}.out.b"]
        h = ln(x, p[f"{i}.ln2.g"], p[f"{i}.ln2.b"])
        return x + mm(jax.nn.gelu(mm(h, p[f"{i}.fc.w"]) + p[f"{i}.fc.b"], approximate=False), p[f"{i}.proj.w"]) + p[f"{i}.proj.b"]

    def logits(p, ids):
        b, t = ids.shape
        x = p["tok"][ids] + p["pos"][:t]

        def attend(qkv):  # [b, t, 3D] -> [b, t, D]
            q, k, v = jnp.split(qkv.reshape(b, t, 3, H, D // H), 3, axis=2)
            o = jax.nn.dot_product_attention(q[:, :, 0], k[:, :, 0], v[:, :, 0], is_causal=True)
            return o.reshape(b, t, D)
        for i in range(L):
            x = block(p, i, x, attend)
        return mm(ln(x, p["lnf.g"], p["lnf.b"]), p["tok"].T)

    def loss_fn(p, x, y):
        logp = jax.nn.log_softmax(logits(p, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[..., None], -1))

    b1, b2, eps, lr, wd = 0.9, 0.95, 1e-8, 1e-3, 0.1

    def step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(d)) for d in jax.tree_util.tree_leaves(g)))
        scale = jnp.minimum(1.0, 1.0 / (norm + 1e-6))
        g = jax.tree_util.tree_map(lambda d: d * scale, g)
        t = s["t"] + 1.0
        m = jax.tree_util.tree_map(lambda m, d: b1 * m + (1 - b1) * d, s["m"], g)
        v = jax.tree_util.tree_map(lambda v, d: b2 * v + (1 - b2) * d * d, s["v"], g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree_util.tree_map(
            lambda w, m, v: w * (1 - lr * wd) - (lr / c1) * m / (jnp.sqrt(v) / jnp.sqrt(c2) + eps), p, m, v)
        return p, {"t": t, "m": m, "v": v}, loss

    def decode(p, cache, token, pos, key):
        """cache [L, 2, 1, H, T, dh]; token [1, 1]; pos i32 scalar."""
        x = p["tok"][token] + jax.lax.dynamic_slice_in_dim(p["pos"], pos, 1)[None]
        new_cache = []
        for i in range(L):
            def attend(qkv):
                q, k, v = [a.reshape(1, 1, H, D // H).transpose(0, 2, 1, 3) for a in jnp.split(qkv, 3, -1)]
                ck = jax.lax.dynamic_update_slice(cache[i, 0], k, (0, 0, pos, 0))
                cv = jax.lax.dynamic_update_slice(cache[i, 1], v, (0, 0, pos, 0))
                new_cache.append(jnp.stack([ck, cv]))
                s = (q @ ck.transpose(0, 1, 3, 2)) / math.sqrt(D // H)
                s = jnp.where(jnp.arange(T) <= pos, s, -1e30)
                return (jax.nn.softmax(s, -1) @ cv).transpose(0, 2, 1, 3).reshape(1, 1, D)
            x = block(p, i, x, attend)
        lg = (ln(x, p["lnf.g"], p["lnf.b"]) @ p["tok"].T)[:, 0] / 0.8
        kth = jax.lax.top_k(lg, 40)[0][:, -1:]
        lg = jnp.where(lg < kth, -1e30, lg)
        return jax.random.categorical(jax.random.fold_in(key, pos), lg).astype(jnp.int32).reshape(1, 1), jnp.stack(new_cache)

    return step, decode


class JaxSide:
    name = "JAX"

    def __init__(self, bf16=False):
        import jax
        import jax.numpy as jnp
        import numpy as np
        self.jax, self.jnp = jax, jnp
        step, _ = jax_model(jax, jnp, bf16)
        _, decode = jax_model(jax, jnp)
        p = {k: jnp.asarray(v) for k, v in init_numpy(np).items()}
        s = {"t": jnp.zeros((), jnp.float32), "m": jax.tree_util.tree_map(jnp.zeros_like, p),
             "v": jax.tree_util.tree_map(jnp.zeros_like, p)}
        x, y = (jnp.asarray(a) for a in batch_numpy(np))
        self.step, self.args = jax.jit(step, donate_argnums=(0, 1)), [p, s, x, y]
        self.decode = jax.jit(decode)
        self.params = {k: jnp.asarray(v) for k, v in init_numpy(np).items()}
        self.version = jax.__version__

    def train(self, steps, clock, losses=None):
        p, s, x, y = self.args
        out = []
        for _ in range(steps):
            t0 = clock()
            p, s, loss = self.step(p, s, x, y)
            loss.block_until_ready()
            out.append((clock() - t0) * 1e6)
            if losses is not None:
                losses.append(float(loss))
        self.args[0], self.args[1] = p, s
        return statistics.median(out)

    def generate(self, tokens, clock):
        jnp = self.jnp
        cache = jnp.zeros((L, 2, 1, H, T, D // H), jnp.float32)
        tok, key, out = jnp.zeros((1, 1), jnp.int32), self.jax.random.PRNGKey(3), []
        for pos in range(tokens):
            t0 = clock()
            tok, cache = self.decode(self.params, cache, tok, jnp.int32(pos), key)
            tok.block_until_ready()
            out.append((clock() - t0) * 1e6)
        return statistics.median(out[1:])


# ---------------------------------------------------------------- PyTorch
class TorchSide:
    name = "PyTorch eager"

    def __init__(self, threads, bf16=False):
        import numpy as np
        import torch
        import torch.nn.functional as F
        torch.set_num_threads(threads)
        self.bf16 = bf16
        self.torch, self.F = torch, F
        self.p = {k: torch.tensor(v, requires_grad=True) for k, v in init_numpy(np).items()}
        self.opt = torch.optim.AdamW(list(self.p.values()), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
        self.x, self.y = (torch.tensor(a, dtype=torch.long) for a in batch_numpy(np))
        self.version = torch.__version__

    def block(self, i, x, attend):
        p, F = self.p, self.F
        h = F.layer_norm(x, (D,), p[f"{i}.ln1.g"], p[f"{i}.ln1.b"])
        x = x + attend(h @ p[f"{i}.qkv.w"] + p[f"{i}.qkv.b"]) @ p[f"{i}.out.w"] + p[f"{i}.out.b"]
        h = F.layer_norm(x, (D,), p[f"{i}.ln2.g"], p[f"{i}.ln2.b"])
        return x + F.gelu(h @ p[f"{i}.fc.w"] + p[f"{i}.fc.b"]) @ p[f"{i}.proj.w"] + p[f"{i}.proj.b"]

    def logits(self, ids):
        b, t = ids.shape
        x = self.p["tok"][ids] + self.p["pos"][:t]

        def attend(qkv):
            q, k, v = qkv.view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
            return self.F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        for i in range(L):
            x = self.block(i, x, attend)
        return self.F.layer_norm(x, (D,), self.p["lnf.g"], self.p["lnf.b"]) @ self.p["tok"].T

    def train(self, steps, clock, losses=None):
        torch, out = self.torch, []
        for _ in range(steps):
            t0 = clock()
            self.opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
                logits = self.logits(self.x)
            loss = self.F.cross_entropy(logits.float().reshape(-1, V), self.y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(self.p.values()), 1.0)
            self.opt.step()
            out.append((clock() - t0) * 1e6)
            if losses is not None:
                losses.append(loss.item())
        return statistics.median(out)

    def generate(self, tokens, clock):
        torch, F, p = self.torch, self.F, self.p
        ks, vs = [None] * L, [None] * L
        tok, out, gen = torch.zeros((1, 1), dtype=torch.long), [], torch.Generator().manual_seed(3)
        with torch.no_grad():
            for pos in range(tokens):
                t0 = clock()
                x = p["tok"][tok] + p["pos"][pos:pos + 1]
                for i in range(L):
                    def attend(qkv):
                        q, k, v = (a.view(1, 1, H, D // H).transpose(1, 2) for a in qkv.split(D, -1))
                        ks[i] = k if ks[i] is None else torch.cat([ks[i], k], 2)
                        vs[i] = v if vs[i] is None else torch.cat([vs[i], v], 2)
                        return F.scaled_dot_product_attention(q, ks[i], vs[i]).transpose(1, 2).reshape(1, 1, D)
                    x = self.block(i, x, attend)
                lg = (F.layer_norm(x, (D,), p["lnf.g"], p["lnf.b"]) @ p["tok"].T)[:, -1] / 0.8
                vals, idx = torch.topk(lg, 40)
                tok = idx.gather(-1, torch.multinomial(F.softmax(vals, -1), 1, generator=gen))
                out.append((clock() - t0) * 1e6)
        return statistics.median(out[1:])


def run_fjit(build, args, clock_field):
    exe = os.path.join(build, "bench", "lm_step")
    r = subprocess.run([exe] + args, capture_output=True, text=True, check=True)
    line = next(l for l in r.stdout.splitlines() if l.startswith(("STEP_US", "DECODE_US")))
    f = line.split()
    return float(f[f.index("WALL_US") + 1]) if clock_field == "wall" else float(f[1])


def main():
    global L, D, H
    a = parse()
    if a.small:
        L, D, H = 2, 128, 2
    setup_threads(a.threads)
    wall = a.threads > 1
    clock = time.perf_counter if wall else time.process_time
    shape = ["--layers", str(L), "--dim", str(D), "--heads", str(H), "--context", str(T)]
    bf16 = a.compute_dtype == "bf16"
    sides = []
    for fw in a.frameworks.split(","):
        try:
            sides.append(JaxSide(bf16) if fw == "jax" else TorchSide(a.threads, bf16))
        except ImportError as e:
            print(f"lm_compare: {fw} is not installed ({e}); skipped")
    what = "wall" if wall else "CPU"
    print(f"decoder {L} layers d {D} heads {H} context {T} batch {B}, training in {a.compute_dtype}, "
          f"{a.threads} core(s), {a.rounds} "
          f"rounds of {a.steps} steps; " + ", ".join(f"{s.name} {s.version}" for s in sides))
    if a.losses > 0:
        for s in sides:
            losses = []
            s.train(a.losses, clock, losses)
            print(f"LOSSES {s.name} {a.compute_dtype} " + " ".join(f"{v:.6f}" for v in losses))
        return 0
    for s in sides:
        s.train(2, clock)  # compile and warm up
        s.generate(4, clock)
    train = {s.name: [] for s in sides}
    decode = {s.name: [] for s in sides}
    fj_train, fj_decode = [], []
    for _ in range(a.rounds):
        f = run_fjit(a.build, shape + ["--steps", str(a.steps), "--batch", str(B), "--compute-dtype", a.compute_dtype],
                     what.lower())
        fj_train.append(f)
        for s in sides:
            train[s.name].append((f, s.train(a.steps, clock)))
        g = run_fjit(a.build, shape + ["--generate", str(a.decode_tokens)], "cpu")
        fj_decode.append(g)
        for s in sides:
            decode[s.name].append((g, s.generate(a.decode_tokens, time.perf_counter)))
        sys.stdout.flush()
    for s in sides:
        for kind, rows in ((f"training step{' bf16' if bf16 else ''}", train[s.name]),
                           ("decode step (batch 1)", decode[s.name])):
            ratios = [f / o for f, o in rows]
            print(f"RESULT fjit/{s.name} LM {kind}, {a.threads} core(s) | {statistics.median(ratios):.2f}x "
                  f"({min(ratios):.2f}-{max(ratios):.2f}) | fjit {statistics.median([f for f, _ in rows]):.0f} us, "
                  f"{s.name} {statistics.median([o for _, o in rows]):.0f} us "
                  f"({what if kind.startswith('training') else 'wall'} time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
