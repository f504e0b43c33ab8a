"""Diffusers on neuron, as a user's script calls it: tiny DDPM, Stable Diffusion
and Flux pipelines against the same pipelines on CPU, neuron torch.Generators
(hf_integration/_diffusers.py, adaptation 9) reproducible under a seed, and the
CPU-offload helpers (`enable_model_cpu_offload`, `enable_sequential_cpu_offload`)
running the models on neuron.

The Stable Diffusion and Flux pipelines are built from their components' config
classes with small random weights (nothing can be downloaded): UNet2DCondition or
FluxTransformer2D, AutoencoderKL, CLIP and T5 text encoders (in eval mode, as
`from_pretrained` gives them: T5's dropout would otherwise draw), and a
word-level tokenizer."""
import pytest
import torch

import torchneuron  # noqa: F401

import diffusers
from diffusers.utils.torch_utils import randn_tensor
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import CLIPTextConfig, CLIPTextModel, PreTrainedTokenizerFast, T5Config, T5EncoderModel

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


def tiny_tokenizer(max_length=16):
    words = ["<pad>", "<unk>", "<s>", "</s>", *"a red cat on blue mat photo of dog".split()]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", model_max_length=max_length)


def tiny_clip():
    return CLIPTextModel(CLIPTextConfig(vocab_size=16, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=16, projection_dim=32,
                                        pad_token_id=0, bos_token_id=2, eos_token_id=3)).eval()


def tiny_vae(**kwargs):
    return diffusers.AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                                   up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16),
                                   latent_channels=4, norm_num_groups=4, sample_size=32, **kwargs)


def tiny_stable_diffusion():
    torch.manual_seed(0)
    unet = diffusers.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=4, norm_num_groups=4)
    return diffusers.StableDiffusionPipeline(
        vae=tiny_vae(), text_encoder=tiny_clip(), tokenizer=tiny_tokenizer(), unet=unet,
        scheduler=diffusers.DDIMScheduler(clip_sample=False, steps_offset=1), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False)


def tiny_flux():
    torch.manual_seed(0)
    transformer = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=8,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=[2, 2, 4])
    t5 = T5EncoderModel(T5Config(vocab_size=16, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                                 pad_token_id=0, eos_token_id=3, decoder_start_token_id=0)).eval()
    vae = tiny_vae(use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035)
    return diffusers.FluxPipeline(
        scheduler=diffusers.FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=tiny_clip(),
        tokenizer=tiny_tokenizer(), text_encoder_2=t5, tokenizer_2=tiny_tokenizer(), transformer=transformer)


PIPELINES = {"stable_diffusion": tiny_stable_diffusion, "flux": tiny_flux}


def generate(pipe, name, generator):
    kwargs = dict(prompt="a red cat on a blue mat", num_inference_steps=2, height=32, width=32, output_type="np",
                  generator=generator)
    if name == "flux":
        kwargs["max_sequence_length"] = 16
    return torch.from_numpy(pipe(**kwargs).images)


@pytest.fixture(scope="module")
def on_cpu():
    """Each pipeline's image on CPU with a seeded CPU generator."""
    return {name: generate(make(), name, torch.Generator().manual_seed(0)) for name, make in PIPELINES.items()}


@pytest.mark.parametrize("name", PIPELINES)
def test_pipeline_matches_cpu_with_a_cpu_generator(name, on_cpu):
    pipe = PIPELINES[name]().to(D)
    assert pipe.device.type == D and pipe._execution_device.type == D
    got = generate(pipe, name, torch.Generator().manual_seed(0))
    assert got.shape == on_cpu[name].shape == (1, 32, 32, 3)
    torch.testing.assert_close(got, on_cpu[name], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", PIPELINES)
def test_pipeline_with_neuron_generators_is_reproducible(name):
    pipe = PIPELINES[name]().to(D)
    a, b = (generate(pipe, name, torch.Generator(device=D).manual_seed(1)) for _ in range(2))
    c = generate(pipe, name, torch.Generator(device=D).manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("name,helper", [("stable_diffusion", "enable_model_cpu_offload"),
                                         ("stable_diffusion", "enable_sequential_cpu_offload"),
                                         ("flux", "enable_model_cpu_offload")])
def test_cpu_offload_helpers_run_the_models_on_neuron(name, helper, on_cpu):
    """The helpers find the device themselves (Diffusers asks torch.accelerator),
    keep the weights on CPU between uses and run each model on neuron:0."""
    pipe = PIPELINES[name]()
    getattr(pipe, helper)()
    assert pipe._execution_device == torch.device(D, 0)
    seen = set()
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.add(args[0].device.type if args and
                                                                  torch.is_tensor(args[0]) else None))
             for m in pipe.components.values() if isinstance(m, torch.nn.Module)]
    got = generate(pipe, name, torch.Generator().manual_seed(0))
    for h in hooks:
        h.remove()
    assert D in seen and "cpu" not in seen, seen
    torch.testing.assert_close(got, on_cpu[name], atol=1e-4, rtol=1e-4)
    if helper == "enable_model_cpu_offload":  # the weights went back to CPU after the call
        assert all(p.device.type == "cpu" for m in pipe.components.values() if isinstance(m, torch.nn.Module)
                   for p in m.parameters())


def test_cpu_offload_to_a_core_that_does_not_exist_is_refused_clearly():
    pipe = tiny_stable_diffusion()
    count = torch.neuron.device_count()
    with pytest.raises(RuntimeError, match=rf"device index {count} is out of range; this process has {count}"):
        pipe.enable_model_cpu_offload(gpu_id=count)
        generate(pipe, "stable_diffusion", torch.Generator().manual_seed(0))
