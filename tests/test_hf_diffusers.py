"""Diffusers on neuron, as a user's script calls it: a tiny DDPM pipeline
against the same pipeline on CPU, and neuron torch.Generators
(hf_integration/_diffusers.py, adaptation 9)."""
import pytest
import torch

import torchneuron  # noqa: F401

import diffusers
from diffusers.utils.torch_utils import randn_tensor

D = "neuron"


def tiny_ddpm():
    torch.manual_seed(0)
    unet = diffusers.UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
        block_out_channels=(8, 16), norm_num_groups=4,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    return diffusers.DDPMPipeline(unet=unet, scheduler=diffusers.DDPMScheduler(num_train_timesteps=50))


def test_ddpm_pipeline_matches_cpu_with_a_cpu_generator():
    pipe = tiny_ddpm()
    want = pipe(batch_size=2, generator=torch.Generator().manual_seed(0), num_inference_steps=4,
                output_type="np").images
    got = pipe.to(D)(batch_size=2, generator=torch.Generator().manual_seed(0),
                     num_inference_steps=4, output_type="np").images
    assert got.shape == want.shape == (2, 8, 8, 3)
    torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(want), atol=1e-4, rtol=1e-4)


def test_neuron_generators_draw_on_the_device_reproducibly():
    g = torch.Generator(device=D).manual_seed(3)
    x = randn_tensor((2, 3), generator=g, device=torch.device(D))
    want = torch.randn((2, 3), generator=torch.Generator(device=D).manual_seed(3), device=D)
    assert x.device.type == D and torch.equal(x.cpu(), want.cpu())
    # one generator per sample, as Diffusers seeds a batch
    gens = [torch.Generator(device=D).manual_seed(s) for s in (1, 2)]
    batch = randn_tensor((2, 4), generator=gens, device=D)
    for row, seed in zip(batch.cpu(), (1, 2)):
        one = torch.randn((1, 4), generator=torch.Generator(device=D).manual_seed(seed), device=D)
        assert torch.equal(row, one.cpu()[0])
    # a CPU generator keeps Diffusers' CPU draw
    cpu = randn_tensor((2, 3), generator=torch.Generator().manual_seed(3), device=D)
    assert torch.equal(cpu.cpu(), torch.randn((2, 3), generator=torch.Generator().manual_seed(3)))


def test_ddpm_pipeline_with_a_neuron_generator():
    pipe = tiny_ddpm().to(D)

    def run(seed):
        return pipe(batch_size=1, generator=torch.Generator(device=D).manual_seed(seed),
                    num_inference_steps=3, output_type="np").images

    a, b, c = run(0), run(0), run(1)
    assert a.shape == (1, 8, 8, 3) and (a == b).all() and not (a == c).all()
