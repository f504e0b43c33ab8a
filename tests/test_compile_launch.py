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
