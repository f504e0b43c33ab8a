"""Device memory statistics and control (the caching allocator)."""
import torch

from .. import _C
from ._device import _checked_index


def memory_stats(device=None) -> dict:
    return torch.accelerator.memory_stats(_checked_index(device, "memory_stats"))


def memory_allocated(device=None) -> int:
    return torch.accelerator.memory_allocated(_checked_index(device, "memory_allocated"))


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(_checked_index(device, "max_memory_allocated"))


def memory_reserved(device=None) -> int:
    return torch.accelerator.memory_reserved(_checked_index(device, "memory_reserved"))


def max_memory_reserved(device=None) -> int:
    return torch.accelerator.max_memory_reserved(_checked_index(device, "max_memory_reserved"))


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_checked_index(device, "reset_peak_memory_stats"))


def reset_accumulated_memory_stats(device=None) -> None:
    index = _checked_index(device, "reset_accumulated_memory_stats")
    torch.accelerator.reset_accumulated_memory_stats(index)


def empty_cache() -> None:
    """Returns cached, unused device memory to the device."""
    _C._empty_cache()


def mem_get_info(device=None):
    """(free, total) bytes of the device."""
    return torch.accelerator.get_memory_info(_checked_index(device, "mem_get_info"))


def memory_snapshot(device=None):
    """The allocator's segments: address, sizes, pool and stream."""
    return _C._memory_snapshot(_checked_index(device, "memory_snapshot"))


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of the allocator's statistics, like torch.cuda.memory_summary."""
    index = _checked_index(device, "memory_summary")
    stats = memory_stats(index)
    free, total = mem_get_info(index)
    rows = [
        ("Allocated memory", "allocated_bytes", _fmt),
        ("Active memory", "active_bytes", _fmt),
        ("Requested memory", "requested_bytes", _fmt),
        ("Reserved memory", "reserved_bytes", _fmt),
        ("Non-releasable memory", "inactive_split_bytes", _fmt),
        ("Allocations", "allocation", str),
        ("Active allocs", "active", str),
        ("Device reserved segments", "segment", str),
    ]
    width = 76
    lines = ["=" * width,
             f" neuron:{index} memory summary ({torch.neuron.get_device_name(index)})",
             f" capacity {_fmt(total)}, free {_fmt(free)}",
             "-" * width,
             f" {'Metric':<26}{'Cur usage':>12}{'Peak usage':>12}{'Tot alloc':>13}{'Tot freed':>13}",
             "-" * width]
    for title, key, fmt in rows:
        pools = ["all"] if abbreviated else ["all", "large_pool", "small_pool"]
        for pool in pools:
            name = title if pool == "all" else f"  from {pool.replace('_', ' ')}"
            get = lambda what: stats.get(f"{key}.{pool}.{what}", 0)  # noqa: E731
            lines.append(f" {name:<26}{fmt(get('current')):>12}{fmt(get('peak')):>12}"
                         f"{fmt(get('allocated')):>13}{fmt(get('freed')):>13}")
    lines.append("-" * width)
    lines.append(f" Cache flushes (alloc retries): {stats.get('num_alloc_retries', 0)}    "
                 f"Out-of-memory errors: {stats.get('num_ooms', 0)}")
    lines.append("=" * width)
    return "\n".join(lines) + "\n"
