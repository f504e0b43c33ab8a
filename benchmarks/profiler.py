"""Profiler overhead: the per-op cost of small ops with profiling off and on.

    python benchmarks/profiler.py [--ops N] [--repeats R] [--rounds K]

`a + b` on 16-element tensors, N ops per repeat, in four fresh processes
(fresh_process.py): CPU eager and neuron, each without a profiler and inside
torch.profiler.profile (CPU eager with ProfilerActivity.CPU; neuron with CPU
and PrivateUse1, so that the device's stream workers timestamp every op).
Per op: the host's issue time (the queue drains outside the timed region) and
the sustained time (drained every N ops). CPU eager is the build-independent
peer: "neuron off / CPU off" is the device's usual per-op ratio, which
profiling support must leave unchanged (docs/performance.md, "Eager mode"),
and "on / off" of each device is what profiling costs. Each figure is the
median of R repeats; --rounds alternates the four processes and keeps each
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

CASES = [("cpu", False), ("cpu", True), ("neuron", False), ("neuron", True)]


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


def child(device, profiled, ops, repeats):
    from torch.profiler import ProfilerActivity, profile

    if not profiled:
        return [*per_op(device, ops, repeats), 0]
    activities = [ProfilerActivity.CPU]
    if device == "neuron":
        activities.append(ProfilerActivity.PrivateUse1)
    with profile(activities=activities) as prof:
        result = per_op(device, ops, repeats)
    # Device intervals recorded (the device's work, op by op).
    recorded = sum(e.name == "aten::add.Tensor" for e in prof.events()
                   if e.device_type != torch.autograd.DeviceType.CPU)
    return [*result, recorded]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        device, profiled, ops, repeats = sys.argv[2], sys.argv[3] == "1", *map(int, sys.argv[4:6])
        if device == "neuron":
            import torchneuron  # noqa: F401
        print(json.dumps(child(device, profiled, ops, repeats)))
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
        for device, profiled in CASES:
            r = measure_in_fresh_process(__file__, device, int(profiled), args.ops, args.repeats)
            if (device, profiled) not in res or r[1] < res[device, profiled][1]:
                res[device, profiled] = r
    print(f"{'case':<24}{'issue us/op':>12}{'sustained us/op':>17}{'sustained / CPU off':>21}"
          f"{'device intervals':>18}")
    cpu_off = res["cpu", False][1]
    for (device, profiled), (issue, sustained, recorded) in res.items():
        name = f"{device} profiler {'on' if profiled else 'off'}"
        print(f"{name:<24}{issue * 1e6:>12.2f}{sustained * 1e6:>17.2f}{sustained / cpu_off:>20.2f}x"
              f"{recorded:>18}")
    for device in ("cpu", "neuron"):
        on, off = res[device, True][1], res[device, False][1]
        print(f"{device}: profiling on / off = {on / off:.2f}x sustained "
              f"(+{(on - off) * 1e6:.2f} us per op)")


if __name__ == "__main__":
    main()
