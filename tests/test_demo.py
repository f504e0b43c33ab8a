"""The main job's demo (python -m torchneuron.demo): its task, tokenizer and
dataset, the training recipe as TRL reads it, and a quick end-to-end run (TRL's
SFTTrainer under `accelerate launch` with FSDP2 on two neuron cores, the saved
checkpoint reloaded on CPU and on neuron). The quick run takes about 40 s."""
import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("trl", reason="the Hugging Face packages of requirements.txt are not installed")

from torchneuron.demo import launch, task  # noqa: E402
from torchneuron.demo.__main__ import parse_args, training_config  # noqa: E402
from torchneuron.demo.dataset import write_dataset  # noqa: E402
from torchneuron.demo.tokenizer import build_tokenizer  # noqa: E402


def test_checker_accepts_only_the_exact_answer():
    q = "What is 27+58?"
    assert task.check(q, "85")
    assert task.check("What is 0+0?", "0")
    assert task.check("What is 99+99?", "198")
    for wrong in ("84", "085", "85 ", " 85", "8", "", "85<|im_end|>", "<|endoftext|>85"):
        assert not task.check(q, wrong), wrong
    for bad in ("What is 27+58", "What is 27-58?", "What is 2a+58?", "27+58=", "What is 27+58+1?"):
        with pytest.raises(ValueError):
            task.parse(bad)
    assert task.parse(task.Problem(3, 41).question) == task.Problem(3, 41)


def test_splits_are_disjoint_deterministic_and_seeded():
    train, held_out = task.splits(0, n_train=20_000, n_test=500)
    assert len(held_out) == 500 and len(train) == 10_000 - 500  # all the other problems
    assert not set(train) & set(held_out)
    assert len(set(train)) == len(train)
    assert all(0 <= p.a < 100 and 0 <= p.b < 100 for p in train + held_out)
    assert max(len(p.answer) for p in train + held_out) == task.answer_length() == 3
    assert task.splits(0, 20_000, 500) == (train, held_out)
    assert task.splits(1, 20_000, 500)[1] != held_out
    with pytest.raises(ValueError, match="leave none to train on"):
        task.splits(0, 10, 10_000)


def test_tokenizer_is_a_transformers_chat_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    tok = build_tokenizer()
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    chat = task.Problem(27, 58).messages()
    for t in (tok, again):
        text = t.apply_chat_template(chat, tokenize=False)
        assert text == "<|im_start|>user\nWhat is 27+58?<|im_end|>\n<|im_start|>assistant\n85<|im_end|>\n"
        enc = t.apply_chat_template(chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        ids = enc["input_ids"]
        assert t.decode(ids) == text and len(ids) == 26  # one token per character, role names whole
        # The assistant's reply and its end of turn are what assistant_only_loss trains on.
        assert [i for i, m in zip(ids, enc["assistant_masks"]) if m] == t.convert_tokens_to_ids(
            ["8", "5", "<|im_end|>"])
        prompt = t.apply_chat_template(chat[:1], add_generation_prompt=True, tokenize=False)
        assert prompt == "<|im_start|>user\nWhat is 27+58?<|im_end|>\n<|im_start|>assistant\n"
        assert (t.eos_token, t.pad_token, t.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
        assert t.padding_side == "left"


def test_dataset_loads_as_a_conversational_dataset(tmp_path):
    from datasets import load_dataset
    from trl.data_utils import is_conversational

    train, held_out = task.splits(0, n_train=30, n_test=10)
    data = load_dataset(str(write_dataset(tmp_path, train, held_out)))
    assert data["train"].num_rows == 30 and data["test"].num_rows == 10
    assert is_conversational(data["train"][0])
    assert data["test"][0]["messages"] == held_out[0].messages()


def test_recipe_is_read_by_trl_as_the_training_script_reads_it(tmp_path):
    """The files the demo writes: TRL's parser takes the recipe with the script's
    dataclasses, and the Accelerate config is FSDP version 2 over two processes."""
    from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser

    args = parse_args(["--quick", "--out", str(tmp_path)])
    recipe = launch.write_yaml(tmp_path / "sft.yaml", training_config(args, tmp_path, processes=2))
    script, sft, model = TrlParser((ScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config(
        ["--config", str(recipe)])
    assert script.dataset_name == str(tmp_path / "data") and model.model_name_or_path == str(tmp_path / "base")
    assert sft.per_device_train_batch_size * 2 == 64 and sft.max_steps == 12
    assert sft.bf16 and sft.assistant_only_loss and sft.device.type == "neuron"
    assert sft.pad_to_multiple_of is None  # hf_integration adaptation 13
    fsdp = launch.write_yaml(tmp_path / "fsdp2.yaml", launch.FSDP2)
    import yaml

    config = yaml.safe_load(fsdp.read_text())
    assert config["distributed_type"] == "FSDP" and config["fsdp_config"]["fsdp_version"] == 2
    assert config["fsdp_config"]["fsdp_state_dict_type"] == "FULL_STATE_DICT"


def test_help_and_bad_arguments(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--help"])
    assert e.value.code == 0
    help_ = capsys.readouterr().out
    assert "--device" in help_ and "--cores" in help_ and "--quick" in help_
    for bad, says in ((["--cores", "3"], "must divide the global batch"), (["--steps", "0"], "at least 1"),
                      (["--device", "gpu"], "invalid choice")):
        with pytest.raises(SystemExit) as e:
            parse_args(bad)
        assert e.value.code == 2, bad
        assert says in capsys.readouterr().err, bad


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "torchneuron.demo", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout, out


def accuracy(label, stdout):
    m = re.search(rf"{re.escape(label)}[^\n]*? ([0-9.]+)% \((\d+)/(\d+) exactly right\)", stdout)
    assert m, f"no '{label}' accuracy line in:\n{stdout}"
    return int(m.group(2)), int(m.group(3))


def test_quick_run_trains_with_fsdp2_on_two_cores(quick_run):
    stdout, out = quick_run
    assert "on 2 neuron cores, one process each, FSDP2" in stdout
    assert re.search(r"\$ accelerate launch --config_file \S+accelerate_fsdp2.yaml --num_processes 2 .*"
                     r"-m torchneuron.demo.sft --config \S+sft.yaml", stdout), stdout
    report = json.loads((out / "train_report.json").read_text())
    assert report["processes"] == 2 and report["distributed_type"] == "FSDP"
    assert report["device"] == "neuron:0" and report["mixed_precision"] == "bf16"
    assert report["steps"] == 12 and report["train_tokens"] > 0
    assert len(report["peak_memory_bytes"]) == 2 and all(b > 0 for b in report["peak_memory_bytes"])
    losses = [loss for _, loss in report["losses"]]
    assert losses[-1] < losses[0]
    assert re.search(r"training: \d+ tokens in [0-9.]+s, \d+ tokens/s \(2 x neuron, FSDP, bf16\)", stdout), stdout
    assert re.search(r"peak device memory in training: core 0: [0-9.]+ MiB, core 1: [0-9.]+ MiB", stdout), stdout


def test_quick_run_prints_accuracy_before_and_after(quick_run):
    stdout, _ = quick_run
    assert accuracy("held-out accuracy before training", stdout)[1] == 64
    cpu = accuracy("device_map='cpu'", stdout)
    assert accuracy("device_map='neuron'", stdout) == cpu
    assert re.search(r"held-out accuracy: [0-9.]+% before training, [0-9.]+% after", stdout), stdout


def test_reloaded_checkpoint_generates_the_same_on_cpu_and_neuron(quick_run):
    stdout, _ = quick_run
    assert "completions identical on cpu and neuron: 64/64" in stdout, stdout


def test_quick_run_saves_a_standard_checkpoint(quick_run):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, out = quick_run
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "chat_template.jinja"):
        assert (out / name).is_file(), name
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, device_map="neuron")
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.dtype == torch.float32
    assert all(p.device.type == "neuron" for p in model.parameters())
    prompt = tok.apply_chat_template(task.Problem(1, 2).messages(with_answer=False), add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True).to("neuron")
    with torch.no_grad():
        got = model.generate(**prompt, max_new_tokens=4)
    assert got.device.type == "neuron" and got.shape[1] > prompt["input_ids"].shape[1]
