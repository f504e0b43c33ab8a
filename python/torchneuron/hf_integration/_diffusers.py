"""Diffusers adaptation (9). Checked against diffusers 0.42.1.

9. `diffusers.utils.torch_utils.randn_tensor`
   Diffusers draws every latent and noise tensor for a `neuron` device on the
   CPU (AWS's devices cannot draw on device) and passed a neuron
   `torch.Generator` along to that CPU draw, which failed with a misleading
   "expected all tensors on one device". With neuron generators (one, or one
   per sample) the wrapper draws on the device with them, as Diffusers does
   for CUDA generators on CUDA; a CPU generator, or none, keeps Diffusers' CPU
   draw (so a seeded CPU generator gives the CPU pipeline's numbers).

"""
import torch


def _wrap_randn_tensor(original):
    def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
        target = torch.device(device) if isinstance(device, str) else device
        generators = generator if isinstance(generator, list) else [generator]
        if (target is None or target.type != "neuron" or generator is None
                or any(g is None or g.device.type != "neuron" for g in generators)):
            return original(shape, generator=generator, device=device, dtype=dtype, layout=layout)
        layout = layout or torch.strided
        if len(generators) == 1:
            return torch.randn(shape, generator=generators[0], device=target, dtype=dtype, layout=layout)
        # One generator per sample, as Diffusers seeds a batch.
        one = (1, *shape[1:])
        return torch.cat([torch.randn(one, generator=g, device=target, dtype=dtype, layout=layout)
                          for g in generators])

    return randn_tensor


TARGETS = {
    "diffusers.utils.torch_utils": [("randn_tensor", lambda f, m: _wrap_randn_tensor(f))],
}
