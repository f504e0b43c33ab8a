"""Accelerate adaptations (1, 2). Checked against accelerate 1.15.0.

1. `accelerate.utils.imports.is_neuron_available`
   Accelerate's device detection (`PartialState`, `dispatch_model`, seeding,
   `release_memory`, ...) has a `neuron` entry, gated on an importable AWS
   `torch_neuronx`, which can never be installed next to torchneuron. The
   wrapper also answers True when the `neuron` device of torchneuron is there.
   Everything Accelerate then calls (`torch.neuron.current_device`,
   `empty_cache`, `manual_seed`, `get_rng_state_all`, ...) exists.

2. `accelerate.utils.modeling.get_max_memory`
   The source of the silent CPU load. Without `max_memory`, the wrapper
   returns `{0: free bytes of neuron:0, 1: ..., "cpu": available RAM}` from
   `torch.neuron.mem_get_info(i)`. Integer keys are kept on purpose: every
   consumer (Accelerate's and Transformers' `get_balanced_memory`,
   `infer_auto_device_map`) treats integer keys as "the accelerators". With a
   user `max_memory`, it validates integer keys against
   `torch.neuron.device_count()` (not CUDA's count) and also accepts
   `"neuron:1"` / `torch.device("neuron", 1)` keys, normalised to `1`.
   Strings like "2GB" are converted in place, as Accelerate does (Transformers
   relies on that side effect).

Checked and left alone (accelerate 1.15.0, torch 2.13.0):

- `accelerate launch --num_processes N` with Accelerate's DDP config
  (`distributed_type: MULTI_NEURON`, as `accelerate config default` writes it
  here, or `MULTI_GPU`) and FSDP2 config (`distributed_type: FSDP`,
  `fsdp_version: 2`): with 1, `PartialState` picks backend "neuron" and
  `DistributedType.MULTI_NEURON`; torchneuron registers that process-group
  backend when torch loads, and each launched process starts on core
  `LOCAL_RANK` (docs/distributed.md), which is what `set_device()` reads from
  `torch.neuron.current_device()`. `fsdp2_load_full_state_dict` (FSDP's
  `cpu_ram_efficient_loading`) moves weights to `device_mesh.device_type`,
  i.e. the process's own core. tests/test_hf_accelerate_launch.py launches both
  configs and compares with one device.
- `gather_object` / `broadcast_object_list` take Accelerate's neuron variants
  (`_neuron_gather_object`), which pad the pickled bytes to at least 1 MiB so
  that AWS's compiler sees few shapes. torchneuron compiles nothing for a
  collective, so the padding only costs a 1 MiB exchange per call; they are
  not on the per-step path of Trainer or SFTTrainer, so this is left as it is.
"""
import torch

from ._common import neuron_is_accelerator


def _wrap_is_neuron_available(original):
    def is_neuron_available(check_device=False):
        if neuron_is_accelerator():
            return True
        return original(check_device)

    return is_neuron_available


def _neuron_index(key):
    """Normalise a max_memory key: neuron devices become their index."""
    if isinstance(key, torch.device):
        if key.type == "neuron":
            return key.index if key.index is not None else torch.neuron.current_device()
        return key.type
    if isinstance(key, str) and key.startswith("neuron"):
        dev = torch.device(key)
        return dev.index if dev.index is not None else torch.neuron.current_device()
    return key



def _wrap_get_max_memory(original, module):
    def get_max_memory(max_memory=None):
        if not neuron_is_accelerator():
            return original(max_memory)
        import psutil

        count = torch.neuron.device_count()
        if max_memory is None:
            result = {}
            for i in range(count):
                try:
                    result[i] = torch.neuron.mem_get_info(i)[0]
                except Exception:
                    continue
            result["cpu"] = psutil.virtual_memory().available
            return result

        convert = module.convert_file_size_to_int
        normalised = {}
        for key in list(max_memory):
            if isinstance(max_memory[key], str):
                max_memory[key] = convert(max_memory[key])  # in place, as Accelerate does
            normalised[_neuron_index(key)] = max_memory[key]
        indices = sorted(k for k in normalised if isinstance(k, int) and not isinstance(k, bool))
        for i in indices:
            if i < 0 or i >= count:
                raise ValueError(
                    f"max_memory names neuron device {i}, but there are {count} neuron devices "
                    f"(valid keys: {list(range(count))} or 'neuron:0'..'neuron:{count - 1}', 'cpu', 'disk')."
                )
        others = [k for k in ("cpu", "disk") if k in normalised]
        unknown = [k for k in normalised if k not in indices and k not in others]
        if unknown:
            raise ValueError(
                f"max_memory keys {unknown} are not recognised; use neuron indices or 'neuron:i', 'cpu' and 'disk'."
            )
        return {k: normalised[k] for k in indices + others}

    return get_max_memory



# module name -> [(function name, wrapper factory(original, module))]
TARGETS = {
    "accelerate.utils.imports": [("is_neuron_available", lambda f, m: _wrap_is_neuron_available(f))],
    "accelerate.utils.modeling": [("get_max_memory", _wrap_get_max_memory)],
}
