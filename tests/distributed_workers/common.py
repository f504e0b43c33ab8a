"""Shared by the torchrun workers of tests/test_distributed.py: process-group set-up by
the ways torch.distributed offers, and a rank-tagged check."""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def rank_env():
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])


def init(mode, timeout_s=60.0):
    """Initializes the default group as `mode` says; returns this rank's device."""
    rank, world, local_rank = rank_env()
    device = torch.device("neuron", local_rank)
    timeout = timedelta(seconds=timeout_s)
    if mode == "neuron":
        dist.init_process_group(backend="neuron", timeout=timeout)
    elif mode == "device_id":
        dist.init_process_group(backend=None, device_id=device, timeout=timeout)
    elif mode == "mixed":
        dist.init_process_group(backend="cpu:gloo,neuron:neuron", timeout=timeout)
    else:
        raise ValueError(f"unknown init mode {mode!r}")
    return device


def check(cond, what):
    if not cond:
        rank = dist.get_rank() if dist.is_initialized() else -1
        print(f"rank {rank}: FAILED {what}", file=sys.stderr, flush=True)
        raise AssertionError(what)
