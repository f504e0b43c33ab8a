"""Registers "neuron" with torch.distributed (import cost: none beyond torch.distributed,
which `import torch` has loaded already)."""
from datetime import timedelta

import torch.distributed as dist

BACKEND = "neuron"


def _gloo_groups(store, rank, size, timeout, topology):
    """The gloo groups between hosts: every rank (data), every rank (agreement rounds),
    the first rank of each host. Made here because torch's Python constructor is where
    gloo learns its network interface (GLOO_SOCKET_IFNAME) and address."""
    def gloo(what, r, n):
        prefix = dist.PrefixStore(f"neuron/gloo/{topology.generation}/{what}/", store)
        return dist.ProcessGroupGloo(prefix, r, n, timeout)

    leaders = gloo("leaders", topology.host, len(topology.hosts)) if topology.is_leader else None
    return gloo("all", rank, size), gloo("control", rank, size), leaders


def _create(options, backend_options):
    # extended_api=True: `options` is c10d's _DistributedBackendOptions.
    from .. import _C

    timeout = options.timeout
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    d = _C._init_distributed()
    store, rank, size = options.store, options.group_rank, options.group_size
    topology = d.HostTopology.exchange(store, rank, size, timeout)
    gloo = _gloo_groups(store, rank, size, timeout, topology) if len(topology.hosts) > 1 else ()
    return d.ProcessGroupNeuron(store, rank, size, timeout, str(options.group_id), topology, *gloo)


def register():
    if not dist.is_available() or hasattr(dist.Backend, BACKEND.upper()):
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=[BACKEND])
