"""How much faster compiling can make an eager step: the step's device work that
compiled programs run with the same calls as eager, and the ceiling it sets.

A compiled program runs the library's matrix products (oneDNN, MKL, the
device's skinny matmul) and the device's attention kernels with the same calls
as eager, and the optimizer and gradient clipping stay outside the compiled
model (foreach and fused ops, run eagerly in both). Compiling shrinks the rest:
the elementwise work, the reductions, the copies and the host's time per op.
A compiled step then takes at least the device time of that shared work, and

    ceiling = eager step / shared work

bounds its speedup over eager (Amdahl's law). The shared work's time is the
least seen in a few profiled steps of eager and of the compiled step: eagerly,
the host thread issuing ops takes one of the machine's cores from the device's
products (on 2 cores eager decoding's products took 1.37x their compiled
time), so eager's own profile alone would set the ceiling too low. A ceiling
below a target ratio puts the target out of reach of compiling on the machine
measured.
"""

# Device ops by what they are, by the start of the profiler's event name:
# eager ops ("aten::mm") and a compiled program's steps ("aten::mm.default",
# "neuron::attention").
SHARED_KINDS = {
    "products": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "attention": ("aten::_scaled_dot_product", "neuron::attention"),
    "optimizer": ("aten::_foreach_", "aten::_fused_adam"),
}
# Steps profiled per measurement: on a shared 2-core machine one step's
# products sometimes took 3x their usual time; the least of a few is the
# work's cost (noise only adds to it).
PROFILED_STEPS = 3


def device_ops(prof):
    """{event name: device milliseconds} of the device's own intervals in a
    finished torch.profiler session."""
    from torch.autograd import DeviceType

    return {e.key: e.self_device_time_total / 1e3 for e in prof.key_averages()
            if e.device_type == DeviceType.PrivateUse1 and not e.is_user_annotation}


def profile_device_ops(step, sync):
    """Runs step() once under torch.profiler; its device_ops()."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        step()
        sync()
    return device_ops(prof)


def shared_work(profiles):
    """{kind: milliseconds} of SHARED_KINDS and the device's total ("all") in
    the profiled step (device_ops() results) whose shared work is least."""
    best = None
    for device_ms in profiles:
        out = {kind: 0.0 for kind in SHARED_KINDS}
        for key, ms in device_ms.items():
            for kind, prefixes in SHARED_KINDS.items():
                if key.startswith(prefixes):
                    out[kind] += ms
                    break
        out["all"] = sum(device_ms.values())
        if best is None or shared_ms(out) < shared_ms(best):
            best = out
    return best


def shared_ms(work):
    return sum(work[kind] for kind in SHARED_KINDS)


def ceiling(eager_step_ms, works):
    """The ceiling on compiled / eager from {peer: shared_work()}: eager step
    over the least shared work."""
    return eager_step_ms / max(min(shared_ms(w) for w in works.values()), 1e-9)


def describe(eager_step_ms, works):
    """One line: each peer's shared work and the ceiling it sets."""
    parts = []
    for peer, work in works.items():
        kinds = ", ".join(f"{kind} {work[kind]:.1f}" for kind in SHARED_KINDS if work[kind] > 0)
        parts.append(f"{peer} {shared_ms(work):.1f} of {work['all']:.1f} ms on the device ({kinds})")
    return (f"work run as eager runs it: {'; '.join(parts)}; eager step {eager_step_ms:.1f} ms: "
            f"ceiling for compiled vs eager {ceiling(eager_step_ms, works):.2f}x")
