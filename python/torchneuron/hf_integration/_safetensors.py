"""safetensors adaptation (12). Checked against safetensors 0.8.0.

12. `safetensors.torch.load_file`
   safetensors reads tensors onto a device it knows by name (cpu, cuda, mps,
   npu, xpu, xla, mlu, musa, hpu); `load_file(path, device="neuron")` (or
   "neuron:1", `torch.device("neuron")`) fails with "device neuron is invalid".
   PEFT loads adapters that way onto the device its `infer_device` picks (11),
   so `PeftModel.from_pretrained(...)` failed there, and users call it
   directly too. For a neuron device the wrapper reads the file on the CPU
   (memory-mapped, as safetensors does) and copies each tensor to the device;
   any other device goes to the original. `safe_open` itself is safetensors'
   compiled class and is left as it is.
"""
import torch


def _neuron_target(device):
    if isinstance(device, torch.device):
        return device if device.type == "neuron" else None
    if isinstance(device, str) and device.split(":")[0] == "neuron":
        return torch.device(device)
    return None


def _wrap_load_file(original):
    def load_file(filename, device="cpu", **kwargs):
        target = _neuron_target(device)
        if target is None:
            return original(filename, device=device, **kwargs)
        return {name: t.to(target) for name, t in original(filename, device="cpu", **kwargs).items()}

    return load_file


TARGETS = {
    "safetensors.torch": [("load_file", lambda f, m: _wrap_load_file(f))],
}
