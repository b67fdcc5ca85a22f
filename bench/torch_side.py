"""PyTorch eager's side of bench/jax_step.py: its training steps written in PyTorch as its users
write them (nn.Module, F.scaled_dot_product_attention, torch.optim), timed in the calling process.

The models are bench/libtorch_models.h's, which are bench/model_step.cc's (the MLPs, the CNN
and the ViT of examples/lib/models.h) with their batches and optimizers: MLP 784-512-512-10
b128 with SGD (lr 0.01) or Adam (lr 1e-3), MLP 64-128-10 b64 SGD, the CNN and the ViT at b128
of u8 pixels with AdamW (lr 1e-3, weight decay 0.01) and dropout; the language model's step is
bench/lm_compare.py's TorchSide. PyTorch's own initialization (the timing does not depend on
the values). A step is zero_grad, forward, mean cross entropy, backward, optimizer step; in
bf16, the forward runs under torch.autocast("cpu", torch.bfloat16) and the loss in f32, as
bench/pytorch_step.py and bench/libtorch_step --compute-dtype bf16 do.
"""
import statistics
import time


def _models(torch):
    nn, F = torch.nn, torch.nn.functional

    def images(x):
        return (x.float() / 255.0).view(x.shape[0], 1, 28, 28)

    class Cnn(nn.Module):
        def __init__(self, rate=0.3):
            super().__init__()
            self.rate = rate
            self.conv1, self.conv2 = nn.Conv2d(1, 32, 3, padding=1), nn.Conv2d(32, 64, 3, padding=1)
            self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
            self.fc1, self.fc2 = nn.Linear(4 * 4 * 128, 128), nn.Linear(128, 10)

        def forward(self, x):
            h = F.max_pool2d(F.relu(self.conv1(images(x))), 2)
            h = F.max_pool2d(F.relu(self.conv2(h)), 2)
            h = F.max_pool2d(F.relu(self.conv3(h)), 2, ceil_mode=True)
            h = F.dropout(h.flatten(1), self.rate / 2, self.training)
            return self.fc2(F.dropout(F.relu(self.fc1(h)), self.rate, self.training))

    class Block(nn.Module):  # pre-norm: x + drop(attn(ln1(x))), x + drop(mlp(ln2(x)))
        def __init__(self, dim=64, heads=4, hidden=128, rate=0.1):
            super().__init__()
            self.heads, self.rate = heads, rate
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc, self.proj = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
            x = x + F.dropout(self.out(a), self.rate, self.training)
            return x + F.dropout(self.proj(F.gelu(self.fc(self.ln2(x)))), self.rate, self.training)

    class Vit(nn.Module):  # 7x7 patches (16 tokens) to 64, learned positions, 4 blocks, mean, head
        def __init__(self):
            super().__init__()
            self.embed, self.head = nn.Linear(49, 64), nn.Linear(64, 10)
            self.pos = nn.Parameter(torch.randn(16, 64) * 0.02)
            self.blocks = nn.ModuleList(Block() for _ in range(4))
            self.ln = nn.LayerNorm(64)

        def forward(self, x):
            b = x.shape[0]
            cols = images(x).view(b, 4, 7, 4, 7).permute(0, 1, 3, 2, 4).reshape(b * 16, 49)
            h = self.embed(cols).view(b, 16, 64) + self.pos
            for block in self.blocks:
                h = block(h)
            return self.head(self.ln(h).mean(1))

    def mlp(sizes):
        layers = []
        for k in range(1, len(sizes)):
            layers += [nn.Linear(sizes[k - 1], sizes[k])] + ([nn.ReLU()] if k + 1 < len(sizes) else [])
        return nn.Sequential(*layers)

    return mlp, Cnn, Vit


def torch_side(name, threads, bf16):
    """(fn(steps, wall) -> median microseconds per step, torch version) for jax_step's model
    `name`; ImportError when torch is not there."""
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(7)
    if name == "lm":
        import lm_compare
        lm = lm_compare.TorchSide(threads, bf16)
        return (lambda n, wall: lm.train(n, time.perf_counter if wall else time.process_time)), torch.__version__
    mlp, Cnn, Vit = _models(torch)
    batch, feats = (64, 64) if name == "mlp-small" else (128, 784)
    if name.startswith("mlp"):
        model = mlp([64, 128, 10] if name == "mlp-small" else [784, 512, 512, 10])
        x = torch.rand(batch, feats) * 2 - 1
    else:
        model = Cnn() if name == "cnn" else Vit()
        x = ((torch.arange(batch * feats) * 37) % 256).to(torch.uint8).view(batch, feats)
    y = (torch.arange(batch) * 7) % 10
    if name in ("mlp-sgd", "mlp-small"):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    elif name == "mlp-adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model.train()
    F = torch.nn.functional

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()

    def timed(n, wall, warmup=1):
        clock, out = time.perf_counter if wall else time.process_time, []
        for i in range(warmup + n):
            t0 = clock()
            step()
            if i >= warmup:
                out.append((clock() - t0) * 1e6)
        return statistics.median(out)

    return timed, torch.__version__
