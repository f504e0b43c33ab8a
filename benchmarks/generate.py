"""Generation benchmark: a ~100M-parameter Llama-style model, `neuron` eager against
PyTorch CPU eager in one run.

    python benchmarks/generate.py [--quick]

Random weights (nothing is downloaded). For float32 and bfloat16, it reports greedy
decoding throughput (batch 1 and 8, 128 new tokens, static cache) and the time to
first token of a 512-token prompt, on CPU and on neuron, and their ratio (target:
neuron throughput >= 1.0x CPU). Both devices run eager with `disable_compile=True`
(Transformers would otherwise compile a static cache's decoding step; compiled
decoding is measured by compile.py). Each device runs in its own fresh
process (see fresh_process.py for why).
"""
import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from fresh_process import isa_line, measure_in_fresh_process  # noqa: E402


def build(dtype):
    config = LlamaConfig(vocab_size=16000, hidden_size=768, intermediate_size=2048,
                         num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                         max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(dtype).eval()


def sync(device):
    if device.type == "neuron":
        torch.neuron.synchronize(device)


def decode_tokens_per_s(model, device, batch, new_tokens):
    ids = torch.randint(3, 16000, (batch, 16), generator=torch.Generator().manual_seed(1))
    ids = ids.to(device)
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                  cache_implementation="static", disable_compile=True, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, **dict(kwargs, max_new_tokens=4, min_new_tokens=4))  # warm-up
        sync(device)
        t = time.perf_counter()
        out = model.generate(ids, **kwargs)
        sync(device)
        elapsed = time.perf_counter() - t
    assert out.shape[1] == 16 + new_tokens
    return batch * new_tokens / elapsed


def time_to_first_token(model, device, prompt):
    ids = torch.randint(3, 16000, (1, prompt), generator=torch.Generator().manual_seed(2))
    ids = ids.to(device)
    kwargs = dict(max_new_tokens=1, do_sample=False, cache_implementation="static",
                  disable_compile=True, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, **kwargs)  # warm-up (first calls of each shape run synchronously)
        sync(device)
        t = time.perf_counter()
        model.generate(ids, **kwargs)
        sync(device)
    return time.perf_counter() - t


def measure(device_name, dtype_name, new_tokens, prompt):
    """All figures of one device and dtype, in this process."""
    device, dtype = torch.device(device_name), getattr(torch, dtype_name)
    model = build(dtype).to(device)
    out = {"params": sum(p.numel() for p in model.parameters())}
    for batch in (1, 8):
        out[f"decode_bs{batch}"] = decode_tokens_per_s(model, device, batch, new_tokens)
    out["ttft"] = time_to_first_token(model, device, prompt)
    return out


def main():
    parser = argparse.ArgumentParser(description="neuron vs CPU generation benchmark")
    parser.add_argument("--quick", action="store_true", help="16 new tokens, 128-token prompt")
    parser.add_argument("--child", nargs=4, metavar=("DEVICE", "DTYPE", "TOKENS", "PROMPT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        device_name, dtype_name, new_tokens, prompt = args.child
        print(json.dumps(measure(device_name, dtype_name, int(new_tokens), int(prompt))))
        return
    new_tokens, prompt = (16, 128) if args.quick else (128, 512)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{new_tokens} new tokens, {prompt}-token prompt for time to first token; "
          "each device measured in its own process", flush=True)
    print(isa_line(), flush=True)
    for dtype_name in ("float32", "bfloat16"):
        c = measure_in_fresh_process(__file__, "cpu", dtype_name, new_tokens, prompt)
        n = measure_in_fresh_process(__file__, "neuron", dtype_name, new_tokens, prompt)
        print(f"\n{dtype_name}, {c['params'] / 1e6:.0f}M parameters")
        print(f"  {'case':<28}{'cpu':>12}{'neuron':>12}{'ratio':>9}")
        for batch in (1, 8):
            key = f"decode_bs{batch}"
            print(f"  {f'decode tokens/s, batch {batch}':<28}{c[key]:>12.1f}{n[key]:>12.1f}"
                  f"{n[key] / c[key]:>8.2f}x   (target >= 1.0x)", flush=True)
        print(f"  {'time to first token, s':<28}{c['ttft']:>12.3f}{n['ttft']:>12.3f}"
              f"{c['ttft'] / n['ttft']:>8.2f}x   (ratio = cpu/neuron, higher is better)", flush=True)


if __name__ == "__main__":
    main()
