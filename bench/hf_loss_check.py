#!/usr/bin/env python3
"""A model fjit exported (train_lm or finetune_lm --export-hf), loaded by transformers: its loss on
a held-out batch against fjit's, and, with --peft, the PEFT adapter finetune_lm --export-peft
wrote, loaded on its base model, against fjit's merged export.

The batch: --rows windows of the model's context (n_positions / max_position_embeddings) from the
end of --text, bytes as tokens (the fjit jobs' tokenizer), the targets the next bytes. fjit's
loss comes from build/bench/hf_eval (it loads the directory itself), transformers' from its
forward pass in float32 (mean next-token cross entropy). Fails above 1e-4 relative.

    /work/main/.venv/bin/python bench/hf_loss_check.py --model runs/base --text CORPUS
    /work/main/.venv/bin/python bench/hf_loss_check.py --model runs/tuned --text CORPUS \
        --peft runs/adapter --base runs/base

Exits 0 with a "skipped" line when torch, transformers (or, for --peft, peft) are missing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

TOLERANCE = 1e-4


def held_out_batch(path, rows, context):
    import torch
    data = b""
    for name in ([os.path.join(path, f) for f in sorted(os.listdir(path))] if os.path.isdir(path) else [path]):
        if os.path.isfile(name):
            with open(name, "rb") as f:
                data += f.read()
    need = rows * context + 1
    if len(data) < need:
        sys.exit(f"hf_loss_check: {path} has {len(data)} bytes, fewer than {need}")
    tail = torch.tensor(list(data[-need:]), dtype=torch.int32)
    return tail[:-1].reshape(rows, context).clone(), tail[1:].reshape(rows, context).clone()


def fjit_loss(hf_eval, model_dir, ids, targets, work):
    from safetensors.torch import load_file, save_file
    batch, out = os.path.join(work, "batch.safetensors"), os.path.join(work, "out.safetensors")
    save_file({"ids": ids.contiguous(), "targets": targets.contiguous()}, batch)
    run = subprocess.run([hf_eval, model_dir, batch, out], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"hf_loss_check: {hf_eval} failed: {run.stderr.strip() or run.stdout.strip()}")
    return float(load_file(out)["loss"])


def torch_loss(model, ids, targets):
    import torch
    with torch.no_grad():
        logits = model(input_ids=ids.long()).logits.float()
        return float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.long().reshape(-1)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a Hugging Face directory fjit wrote")
    parser.add_argument("--text", required=True, help="a text file or folder: the batch is its tail")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--peft", help="a PEFT adapter directory (finetune_lm --export-peft)")
    parser.add_argument("--base", help="the adapter's base model (finetune_lm --init-from)")
    parser.add_argument("--build", default="build")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        from transformers import AutoModelForCausalLM
        if args.peft:
            from peft import PeftModel
    except ImportError as e:
        print(f"hf_loss_check: skipped ({e})")
        return 0
    hf_eval = os.path.join(args.build, "bench", "hf_eval")
    if not os.access(hf_eval, os.X_OK):
        sys.exit(f"hf_loss_check: {hf_eval} is missing (cmake --build {args.build} --target hf_eval)")
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    context = config.get("n_positions") or config.get("max_position_embeddings")
    ids, targets = held_out_batch(args.text, args.rows, context)
    load = lambda d: AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    worst = 0.0
    with tempfile.TemporaryDirectory() as work:
        ours = fjit_loss(hf_eval, args.model, ids, targets, work)
        checks = [("transformers", args.model, torch_loss(load(args.model), ids, targets))]
        if args.peft:
            peft_model = PeftModel.from_pretrained(load(args.base or args.model), args.peft).eval()
            checks.append(("transformers + peft", args.peft, torch_loss(peft_model, ids, targets)))
    for what, where, theirs in checks:
        rel = abs(ours - theirs) / abs(theirs)
        worst = max(worst, rel)
        print(f"{what} ({where}): loss {theirs:.6f} nats | fjit {ours:.6f} | relative difference {rel:.2e}")
    print(f"hf_loss_check: {'ok' if worst <= TOLERANCE else 'FAILED'} ({args.rows} x {context} tokens "
          f"from the end of {args.text}; worst {worst:.2e}, tolerance {TOLERANCE})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
