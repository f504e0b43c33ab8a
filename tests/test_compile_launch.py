"""What a compiled program reads: its inputs as they were when it was launched.

A program runs later, on the device's stream, while the host goes on. FSDP2 frees
an unsharded parameter with `untyped_storage().resize_(0)` as soon as the forward
that reads it is queued (and later all-gathers into a fresh allocation): the
queued program must read the memory the parameter held at launch, as eager ops do.
"""
import torch

DEV = torch.device("neuron")


def _queue_busy_work():
    """A few matrix products ahead on the stream, so that the host acts before the
    next launch runs."""
    a = torch.randn(768, 768, device=DEV)
    for _ in range(4):
        a = (a @ a) * 1e-3
    return a


def test_a_program_reads_its_inputs_as_they_were_at_launch():
    f = torch.compile(lambda x, w: torch.relu(x @ w) + 1, backend="neuron")
    x, w = torch.randn(8, 64), torch.randn(64, 32)
    want = torch.relu(x @ w) + 1
    xd, wd = x.to(DEV), w.to(DEV)
    f(xd, wd)  # compiles
    torch.neuron.synchronize()
    _queue_busy_work()
    out = f(xd, wd)
    wd.untyped_storage().resize_(0)  # freed on the host while the program waits in the queue
    torch.neuron.synchronize()
    torch.testing.assert_close(out.cpu(), want)
    # The storage gets memory again (FSDP2's next all-gather) and the program reads it.
    wd.untyped_storage().resize_(w.numel() * w.element_size())
    wd.copy_(w * 2)
    torch.testing.assert_close(f(xd, wd).cpu(), torch.relu(x @ (w * 2)) + 1)


def test_memory_freed_while_a_program_is_queued_is_reused_after_it():
    """A queued program holds its inputs, outputs and scratch memory as eager ops
    do: what the host frees goes back to the stream's pool at once, and its reuse
    comes after the program. So a host running ahead of its programs reuses the
    same blocks instead of making new segments for every call, and each program
    still reads and writes the values it was launched with."""
    f = torch.compile(lambda x, s: torch.nn.functional.silu(x) * s + x, backend="neuron")
    x = torch.randn(512, 2048)
    xd = x.to(DEV)
    f(xd, 2.0)  # compiles
    torch.neuron.synchronize()
    big = torch.randn(4096, 4096, device=DEV)
    torch.neuron.synchronize()
    product = big @ big  # a few tenths of a second of work ahead of the programs
    before = torch.neuron.memory_stats()
    results = []
    for i in range(8):
        inp = xd * (i + 1)  # freed by the host while the program reading it waits
        out = f(inp, 2.0)
        if i % 4 == 3:
            results.append((i, out))  # the others are freed before they run
        del inp, out
    still_queued = not torch.neuron.current_stream().query()
    during = torch.neuron.memory_stats()
    torch.neuron.synchronize()
    assert still_queued, "the device finished its queued work before the check: the host was not ahead"
    # Without reuse, each call's input and output would take new blocks.
    new_bytes = during["allocated_bytes.all.current"] - before["allocated_bytes.all.current"]
    block = xd.numel() * xd.element_size()
    assert new_bytes <= 4 * block, f"{new_bytes} bytes still allocated for 2 kept outputs of {block}"
    for i, out in results:
        xi = x * (i + 1)
        torch.testing.assert_close(out.cpu(), torch.nn.functional.silu(xi) * 2.0 + xi)
