"""Registers "neuron" with torch.distributed (import cost: none beyond torch.distributed,
which `import torch` has loaded already)."""
from datetime import timedelta

import torch.distributed as dist

BACKEND = "neuron"


def _create(options, backend_options):
    # extended_api=True: `options` is c10d's _DistributedBackendOptions.
    from .. import _C

    timeout = options.timeout
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    cls = _C._init_distributed().ProcessGroupNeuron
    return cls(options.store, options.group_rank, options.group_size, timeout,
               str(options.group_id))


def register():
    if not dist.is_available() or hasattr(dist.Backend, BACKEND.upper()):
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=[BACKEND])
