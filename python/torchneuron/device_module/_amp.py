"""What torch.autocast(device_type="neuron") may cast to."""
import torch


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
