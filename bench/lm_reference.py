#!/usr/bin/env python3
"""An independent reference for train_lm: the same run in PyTorch (optional).

    python3 bench/lm_reference.py --token-file runs/lm/corpus.tokens [--fjit-log train_lm.out]
                                  [--steps 600] [--threads 2] [train_lm's model and schedule options]

Trains the model of core/nn/decoder.h (GPT-style: learned positions, pre-norm layer norm,
causal attention, exact-GELU MLP of width 4d, tied embeddings; GPT-2's initialization
scheme: N(0, 0.02) weights, residual projections N(0, 0.02 / sqrt(2 layers)), zero biases,
unit gains) with PyTorch's own random numbers, on exactly train_lm's batches: the token file
train_lm wrote (64-byte header, then one byte per token), its split (the last
floor(n * validation_fraction) tokens are validation), its windows of context + 1 tokens,
and its batch order (epoch e visits the training windows in the Fisher-Yates permutation of
std::mt19937_64 seeded with seed + e, as core/io/data.cc's epoch_permutation). The schedule
is train_lm's (linear warm-up from 0, then a cosine to lr * min_lr_ratio), the optimizer
torch.optim.AdamW (b2 0.95, weight decay on every parameter as fjit's AdamW) after clipping
to global norm 1. Validation is the mean cross entropy over the first eval_batches global
batches of validation windows, in bits per byte.

Prints `== step N | validation X bits/byte` lines as train_lm does. With --fjit-log (train_lm's
output of the same run) it prints both curves side by side and a RESULT line: the relative
difference of the final validation losses (the target is within 2%). Exits 0 with a note
when torch cannot be imported.
"""
import argparse
import math
import re
import sys
import time

MASK64 = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64 (the 64-bit Mersenne Twister of the C++ standard)."""
    N, M = 312, 156

    def __init__(self, seed):
        self.mt = [0] * self.N
        self.mt[0] = seed & MASK64
        for i in range(1, self.N):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK64
        self.index = self.N

    def __call__(self):
        if self.index >= self.N:
            mt, upper, lower = self.mt, 0xFFFFFFFF80000000, 0x7FFFFFFF
            for i in range(self.N):
                x = (mt[i] & upper) | (mt[(i + 1) % self.N] & lower)
                xa = x >> 1
                if x & 1:
                    xa ^= 0xB5026F5AA96619E9
                mt[i] = mt[(i + self.M) % self.N] ^ xa
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


def epoch_permutation(n, seed, epoch):
    perm = list(range(n))
    rng = MT19937_64((seed + epoch) & MASK64)
    for i in range(n - 1, 0, -1):
        bound = i + 1
        threshold = (-bound % (1 << 64)) % bound
        while True:
            x = rng()
            if x >= threshold:
                j = x % bound
                break
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--fjit-log", help="train_lm's output of the same run, to compare with")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip-grad-norm", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-batches", type=int, default=16)
    ap.add_argument("--validation-fraction", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=2)
    return ap.parse_args()


def learning_rate(a, step):
    decay = max(1, a.steps - a.warmup_steps)

    def cosine(t):
        f = min(t, decay) / decay
        final = a.lr * a.min_lr_ratio
        return final + (a.lr - final) * 0.5 * (1 + math.cos(math.pi * f))
    if step < a.warmup_steps:
        return cosine(0) * step / a.warmup_steps
    return cosine(step - a.warmup_steps)


def build(torch, a):
    nn, F = torch.nn, torch.nn.functional
    D, H = a.dim, a.heads
    torch.manual_seed(a.seed)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
            x = x + self.out(y)
            return x + self.proj(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(256, D), nn.Embedding(a.context, D)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.norm = nn.LayerNorm(D)
            for name, p in self.named_parameters():
                if name.endswith("weight") and p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * a.layers) if name.endswith(("out.weight", "proj.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, ids):
            x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
            for blk in self.blocks:
                x = blk(x)
            return self.norm(x) @ self.tok.weight.T

    return GPT()


def main():
    a = parse()
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"lm_reference: PyTorch is not installed ({e}); skipped "
              "(python3 -m venv .venv && .venv/bin/pip install torch)")
        return 0
    torch.set_num_threads(a.threads)
    raw = np.fromfile(a.token_file, dtype=np.uint8)
    if raw[:8].tobytes() != b"FJITTOK\n" or int.from_bytes(raw[12:16].tobytes(), "little") != 1:
        sys.exit(f"{a.token_file}: not a token file of one byte per token")
    count = int.from_bytes(raw[24:32].tobytes(), "little")
    tokens = torch.from_numpy(raw[64:64 + count].astype(np.int64))
    val_len = int(math.floor(count * a.validation_fraction))
    train_end, T, B = count - val_len, a.context, a.batch_size
    train_windows, val_windows = train_end // (T + 1), val_len // (T + 1)
    per_epoch = train_windows // B

    def rows(starts):
        w = torch.stack([tokens[s:s + T + 1] for s in starts])
        return w[:, :-1], w[:, 1:]

    model = build(torch, a)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=a.weight_decay)
    F = torch.nn.functional

    def validation():
        n = min(a.eval_batches, val_windows // B)
        total = 0.0
        with torch.no_grad():
            for g in range(n):
                x, y = rows([train_end + (g * B + r) * (T + 1) for r in range(B)])
                total += F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1), reduction="sum").item()
        return total / (n * B * T) / math.log(2)

    print(f"torch {torch.__version__}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{train_windows} training windows ({per_epoch} batches an epoch), {val_windows} validation")
    curve, perm, perm_epoch, t0 = {}, None, -1, time.time()
    for step in range(a.steps):
        epoch, g = divmod(step, per_epoch)
        if epoch != perm_epoch:
            perm, perm_epoch = epoch_permutation(train_windows, a.seed, epoch), epoch
        x, y = rows([perm[g * B + r] * (T + 1) for r in range(B)])
        for group in opt.param_groups:
            group["lr"] = learning_rate(a, step)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        loss.backward()
        if a.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_grad_norm)
        opt.step()
        done = step + 1
        if (a.eval_every > 0 and done % a.eval_every == 0) or done == a.steps:
            curve[done] = validation()
            print(f"== step {done:>6} | validation {curve[done]:.4f} bits/byte | train loss {loss.item():.4f} "
                  f"| {time.time() - t0:.0f}s", flush=True)
    if a.fjit_log:
        fjit = {int(m.group(1)): float(m.group(2)) for m in
                re.finditer(r"== step\s+(\d+) \| validation ([0-9.]+) bits/byte", open(a.fjit_log).read())}
        print("step | fjit bits/byte | PyTorch bits/byte")
        for s in sorted(set(curve) & set(fjit)):
            print(f"{s} | {fjit[s]:.4f} | {curve[s]:.4f}")
        last = max(set(curve) & set(fjit), default=None)
        if last is None:
            print("no common evaluation step in the fjit log")
            return 1
        rel = (fjit[last] - curve[last]) / curve[last]
        print(f"RESULT fjit vs PyTorch validation loss at step {last} | {100 * rel:+.2f}% | fjit "
              f"{fjit[last]:.4f}, PyTorch {curve[last]:.4f} bits/byte (target: within 2%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
