"""PEFT adaptation (11). Checked against peft 0.21.2.

11. `peft.utils.other.infer_device`
   PEFT picks the device itself where the user names none: `PeftModel.from_pretrained`
   and `load_adapter` load the adapter weights onto it (`torch_device=None`),
   hot-swapping and some tuners place tensors there. It knows a fixed list
   (cuda, mps, mlu, xpu, npu) and answers "cpu" for any other device. When
   `neuron` is the accelerator the wrapper answers "neuron", as the original
   answers "cuda" on a GPU; otherwise the original decides.
"""
from ._common import neuron_is_accelerator


def _wrap_infer_device(original):
    def infer_device():
        if neuron_is_accelerator():
            return "neuron"
        return original()

    return infer_device


TARGETS = {
    "peft.utils.other": [("infer_device", lambda f, m: _wrap_infer_device(f))],
}
