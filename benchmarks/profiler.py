"""Profiler overhead: the per-op cost of small ops with profiling off and on.

    python benchmarks/profiler.py [--ops N] [--repeats R] [--rounds K]

`a + b` on 16-element tensors, N ops per repeat, each case in a fresh process
(fresh_process.py): CPU eager without a profiler and inside
torch.profiler.profile(activities=[CPU]); neuron the same, and with
[CPU, PrivateUse1], where the device's stream workers timestamp every op too
("host" to "device" is the cost of the device's records alone).
Per op: the host's issue time (the queue drains outside the timed region) and
the sustained time (drained every N ops). CPU eager is the build-independent
peer: "neuron off / CPU off" is the device's usual per-op ratio, which
profiling support must leave unchanged (docs/performance/eager.md, "Eager mode"),
and "on / off" of each device is what profiling costs. Each figure is the
median of R repeats; --rounds alternates the processes and keeps each
case's fastest round (the one least disturbed by other load on a shared
machine); only ratios within a run count.
"""
import argparse
import json
import statistics
import sys
import time

import torch

from fresh_process import isa_line, measure_in_fresh_process

# (device, profiler): "off", "host" (ProfilerActivity.CPU: torch's own op
# recording), "device" (CPU and PrivateUse1: the stream workers timestamp too).
CASES = [("cpu", "off"), ("cpu", "host"), ("neuron", "off"), ("neuron", "host"),
         ("neuron", "device")]


def sync(device):
    if device == "neuron":
        torch.neuron.synchronize()


def per_op(device, ops, repeats):
    a = torch.randn(16, device=device)
    b = torch.randn(16, device=device)
    for _ in range(200):  # first calls, caches, worker threads
        a + b
    sync(device)
    issue, sustained = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(ops):
            a + b
        issued = time.perf_counter()
        sync(device)
        done = time.perf_counter()
        issue.append((issued - t) / ops)
        sustained.append((done - t) / ops)
    return statistics.median(issue), statistics.median(sustained)


def child(device, profiler, ops, repeats):
    from torch.profiler import ProfilerActivity, profile

    if profiler == "off":
        return [*per_op(device, ops, repeats), 0]
    activities = [ProfilerActivity.CPU]
    if profiler == "device":
        activities.append(ProfilerActivity.PrivateUse1)
    with profile(activities=activities) as prof:
        result = per_op(device, ops, repeats)
    # Device intervals recorded (the device's work, op by op).
    recorded = sum(e.name == "aten::add.Tensor" for e in prof.events()
                   if e.device_type != torch.autograd.DeviceType.CPU)
    return [*result, recorded]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        device, profiler, ops, repeats = sys.argv[2], sys.argv[3], *map(int, sys.argv[4:6])
        if device == "neuron":
            import torchneuron  # noqa: F401
        print(json.dumps(child(device, profiler, ops, repeats)))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=int, default=4000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--rounds", type=int, default=3,
                   help="measure every case this many times, alternating, and keep its fastest")
    args = p.parse_args()
    print(f"torch {torch.__version__}; a + b on 16 floats, {args.ops} ops x {args.repeats} repeats, "
          f"best of {args.rounds} rounds")
    print(isa_line())
    res = {}
    for _ in range(args.rounds):
        for case in CASES:
            r = measure_in_fresh_process(__file__, *case, args.ops, args.repeats)
            if case not in res or r[1] < res[case][1]:
                res[case] = r
    print(f"{'case':<24}{'issue us/op':>12}{'sustained us/op':>17}{'sustained / CPU off':>21}"
          f"{'device intervals':>18}")
    cpu_off = res["cpu", "off"][1]
    for (device, profiler), (issue, sustained, recorded) in res.items():
        name = f"{device}, profiler {profiler}"
        print(f"{name:<24}{issue * 1e6:>12.2f}{sustained * 1e6:>17.2f}{sustained / cpu_off:>20.2f}x"
              f"{recorded:>18}")
    for device, on, off in [("cpu", "host", "off"), ("neuron", "host", "off"),
                            ("neuron", "device", "off"), ("neuron", "device", "host")]:
        a, b = res[device, on][1], res[device, off][1]
        print(f"{device}: profiler {on} / {off} = {a / b:.2f}x sustained "
              f"({(a - b) * 1e6:+.2f} us per op)")


if __name__ == "__main__":
    main()
