"""The main job's demo: train a small transformer classifier on `neuron`.

    python -m torchneuron.demo [--steps N] [--device neuron:0]

The task is generated here (no downloads): sequences of random tokens, and
the label is whether the sequence holds more even than odd tokens. It prints
the loss curve, the accuracy before and after training, and the device's
memory summary.
"""
import argparse
import time

import torch
from torch import nn


class TinyTransformer(nn.Module):
    def __init__(self, vocab=32, dim=64, heads=4, layers=2, seq=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 2)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens) + self.pos)
        return self.head(h.mean(dim=1))


def make_batch(n, seq, vocab, generator):
    tokens = torch.randint(0, vocab, (n, seq), generator=generator)
    labels = ((tokens % 2 == 0).sum(dim=1) > seq // 2).long()
    return tokens, labels


def accuracy(model, tokens, labels):
    model.eval()
    with torch.no_grad():
        pred = model(tokens).argmax(dim=1)
    model.train()
    return (pred == labels).float().mean().item()


def sparkline(values, width=60):
    bars = "▁▂▃▄▅▆▇█"
    step = max(1, len(values) // width)
    pts = [sum(values[i:i + step]) / len(values[i:i + step]) for i in range(0, len(values), step)]
    lo, hi = min(pts), max(pts)
    span = (hi - lo) or 1.0
    return "".join(bars[min(len(bars) - 1, int((v - lo) / span * (len(bars) - 1) + 0.5))] for v in pts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", default="neuron")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    props = torch.neuron.get_device_properties(device)
    print(f"device {device}: {props.name}, {props.total_memory / 2**30:.1f} GiB, "
          f"{torch.neuron.device_count()} core(s)")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    seq, vocab = 24, 32
    test_x, test_y = make_batch(1024, seq, vocab, gen)
    test_x, test_y = test_x.to(device), test_y.to(device)

    model = TinyTransformer(vocab=vocab, seq=seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e3:.0f}K parameters; held-out accuracy before training: "
          f"{accuracy(model, test_x, test_y):.1%}")

    losses = []
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        x, y = make_batch(args.batch, seq, vocab, gen)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == args.steps:
            rate = step / (time.perf_counter() - start)
            print(f"  step {step:4d}/{args.steps}  loss {sum(losses[-50:]) / len(losses[-50:]):.4f}"
                  f"  ({rate:.1f} steps/s)", flush=True)
    torch.neuron.synchronize(device)
    print(f"\nloss curve ({losses[0]:.3f} -> {losses[-1]:.3f}):\n  {sparkline(losses)}")
    print(f"held-out accuracy after training: {accuracy(model, test_x, test_y):.1%}\n")
    print(torch.neuron.memory_summary(device, abbreviated=True))


if __name__ == "__main__":
    main()
