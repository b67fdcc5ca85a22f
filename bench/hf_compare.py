#!/usr/bin/env python3
"""fjit's Hugging Face import against transformers: logits, gradients, export round trip, PEFT.

For small random GPT-2 and Llama models made here with transformers (nothing is downloaded),
saved with save_pretrained, this runs build/bench/hf_eval (fjit loads the directory, computes
the logits of a batch and the gradients of its mean cross entropy, writes them under HF names)
and compares them with transformers' forward and backward in float32. Then:
  - round trip: hf_eval's save_hf_model of the imported parameters, read back by
    from_pretrained, gives the same logits as the original;
  - PEFT: hf_eval's save_peft_adapter output, loaded with peft.PeftModel.from_pretrained on the
    original model, gives the logits fjit computes with the adapters merged.

Error measure, per tensor: max |fjit - torch| / max |torch| (the worst over a model's logits,
gradients, round trip and adapter logits is printed); a model fails above 1e-4.

    /work/main/.venv/bin/python bench/hf_compare.py [--build build] [--only NAME ...]

Exits 0 with a "skipped" line when torch or transformers cannot be imported; 1 when any model
fails.
"""
import argparse
import os
import subprocess
import sys
import tempfile

TOLERANCE = 1e-4


def models():
    """name -> (config maker, dtype, sharded). Small: every size below a few hundred."""
    from transformers import GPT2Config, LlamaConfig

    def gpt2(activation, tied=True):
        return lambda: GPT2Config(vocab_size=61, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                  activation_function=activation, tie_word_embeddings=tied,
                                  bos_token_id=None, eos_token_id=None)

    def llama(kv_heads, bias, tied, theta=10000.0, eps=1e-6):
        return lambda: LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=kv_heads, max_position_embeddings=16,
                                   attention_bias=bias, tie_word_embeddings=tied, rms_norm_eps=eps,
                                   rope_parameters={"rope_type": "default", "rope_theta": theta},
                                   bos_token_id=None, eos_token_id=None)

    import torch
    return {
        # What the decoder computes before the GPT-2/Llama options (kv_heads, attention_bias,
        # norm_eps, rope_theta, gelu_tanh) are implemented in core/nn:
        "gpt2-gelu-tied": (gpt2("gelu"), torch.float32, False),
        "llama-mha-bias-tied": (llama(4, True, True), torch.float32, False),
        # What needs them:
        "gpt2-gelu_new-untied-sharded": (gpt2("gelu_new", tied=False), torch.float32, True),
        "llama-gqa-untied": (llama(2, False, False, theta=500000.0, eps=1e-5), torch.float32, False),
        "llama-gqa-bf16-sharded": (llama(2, False, False), torch.bfloat16, True),
    }


def rel_error(a, b):
    """max |a - b| / max |b| over one tensor (0 when both are 0)."""
    import torch
    a, b = a.double(), b.double()
    scale = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff / scale if scale > 0 else diff


def reference(model_dir, ids, targets):
    """transformers' logits, loss and gradients (by HF parameter name) in float32."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    logits = model(input_ids=ids.long()).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.long().reshape(-1))
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    return model, logits.detach(), loss.detach(), grads


def run_model(name, make_config, dtype, sharded, hf_eval, work):
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    torch.manual_seed(sum(map(ord, name)))
    config = make_config()
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # biases and norm gains away from their initial 0 and 1
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model = model.to(dtype)
    src = os.path.join(work, name)
    model.save_pretrained(src, max_shard_size="20KB" if sharded else "10GB")
    if sharded and not os.path.exists(os.path.join(src, "model.safetensors.index.json")):
        raise RuntimeError(f"{name}: save_pretrained did not shard")

    batch, tokens = 3, 12
    ids = torch.randint(0, config.vocab_size, (batch, tokens), dtype=torch.int32)
    targets = torch.randint(0, config.vocab_size, (batch, tokens), dtype=torch.int32)
    batch_file = os.path.join(work, name + "-batch.safetensors")
    save_file({"ids": ids, "targets": targets}, batch_file)
    out_file = os.path.join(work, name + "-fjit.safetensors")
    saved, adapter = os.path.join(work, name + "-saved"), os.path.join(work, name + "-lora")
    run = subprocess.run([hf_eval, src, batch_file, out_file, "--save", saved, "--lora", adapter],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return None, (run.stderr.strip() or run.stdout.strip()).splitlines()[-1]
    fjit = load_file(out_file)

    ref_model, logits, loss, grads = reference(src, ids, targets)
    errors = {"logits": rel_error(fjit["logits"], logits), "loss": rel_error(fjit["loss"], loss)}
    fjit_grads = {k[len("grad."):]: v for k, v in fjit.items() if k.startswith("grad.")}
    if set(fjit_grads) != set(grads):
        return None, f"gradient names differ: fjit only {sorted(set(fjit_grads) - set(grads))}, " \
                     f"transformers only {sorted(set(grads) - set(fjit_grads))}"
    for n, g in grads.items():
        errors["grad." + n] = rel_error(fjit_grads[n], g)

    # Round trip: fjit's export read by from_pretrained.
    with torch.no_grad():
        back = AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32, attn_implementation="eager")
        errors["round trip logits"] = rel_error(back(input_ids=ids.long()).logits, logits)
        # PEFT: the adapters on the original model against fjit's merged logits.
        from peft import PeftModel
        peft_model = PeftModel.from_pretrained(ref_model, adapter)
        peft_model.eval()
        errors["peft logits"] = rel_error(fjit["lora_logits"], peft_model(input_ids=ids.long()).logits)
    return errors, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    parser.add_argument("--only", nargs="*", help="model names to run (default: all)")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import peft  # noqa: F401
        from safetensors.torch import load_file  # noqa: F401
    except ImportError as e:
        print(f"hf_compare: skipped ({e})")
        return 0
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    hf_eval = os.path.join(args.build, "bench", "hf_eval")
    if not os.access(hf_eval, os.X_OK):
        print(f"hf_compare: {hf_eval} is missing (cmake --build {args.build} --target hf_eval)")
        return 1
    failed = []
    with tempfile.TemporaryDirectory(prefix="fjit_hf_compare_") as work:
        for name, (make_config, dtype, sharded) in models().items():
            if args.only and name not in args.only:
                continue
            errors, problem = run_model(name, make_config, dtype, sharded, hf_eval, work)
            if problem:
                print(f"FAIL {name}: {problem}")
                failed.append(name)
                continue
            worst = max(errors, key=errors.get)
            ok = errors[worst] <= TOLERANCE
            print(f"{'ok  ' if ok else 'FAIL'} {name}: worst relative error {errors[worst]:.2e} ({worst}); "
                  f"logits {errors['logits']:.2e}, round trip {errors['round trip logits']:.2e}, "
                  f"peft {errors['peft logits']:.2e}")
            if not ok:
                failed.append(name)
    print(f"hf_compare: {'all passed' if not failed else 'failed: ' + ', '.join(failed)} (tolerance {TOLERANCE:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
