"""The main job's demo (python -m torchneuron.demo): its task, its tokenizer,
and a short end-to-end run on neuron (train, save, reload, generate)."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("transformers", reason="the Hugging Face packages of requirements.txt are not installed")

from torchneuron.demo import task  # noqa: E402
from torchneuron.demo.tokenizer import build_tokenizer  # noqa: E402
from torchneuron.demo.train import encode  # noqa: E402


def test_checker_accepts_only_the_exact_answer():
    assert task.check("27+58=", "85")
    assert task.check("0+0=", "0")
    assert task.check("99+99=", "198")
    for wrong in ("84", "085", "85 ", " 85", "8", "", "85<eos>", "<pad>85"):
        assert not task.check("27+58=", wrong), wrong
    for bad in ("27+58", "27-58=", "2a+58=", "27+58+1="):
        with pytest.raises(ValueError):
            task.parse(bad)


def test_splits_are_disjoint_deterministic_and_seeded():
    train, held_out = task.splits(0, n_train=20_000, n_test=500)
    assert len(held_out) == 500 and len(train) == 10_000 - 500  # all the other problems
    assert not set(train) & set(held_out)
    assert len(set(train)) == len(train)
    assert all(0 <= p.a < 100 and 0 <= p.b < 100 for p in train + held_out)
    assert max(len(p.answer) for p in train + held_out) == task.answer_length() == 3
    assert task.splits(0, 20_000, 500) == (train, held_out)
    assert task.splits(1, 20_000, 500)[1] != held_out
    small_train, small_held = task.splits(3, n_train=50, n_test=20, digits=3)
    assert len(small_train) == 50 and not set(small_train) & set(small_held)


def test_tokenizer_saves_and_reloads_as_a_transformers_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    tok = build_tokenizer()
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    for t in (tok, again):
        ids = t("12+34=").input_ids
        assert ids[0] == t.bos_token_id and len(ids) == 7
        assert t.decode(ids, skip_special_tokens=True) == "12+34="
        assert {t.pad_token_id, t.bos_token_id, t.eos_token_id} <= set(range(len(t)))
        assert t.padding_side == "left"
        batch = t(["1+2=", "12+34="], padding=True)
        assert batch.input_ids[0][:3] == [t.pad_token_id] * 2 + [t.bos_token_id]
        assert batch.attention_mask[0] == [0, 0] + [1] * 5
    assert again("12+34=").input_ids == tok("12+34=").input_ids


def test_training_labels_cover_the_answer_and_eos_only():
    tok = build_tokenizer()
    ids, labels, mask = encode([task.Problem(27, 58), task.Problem(1, 2)], tok)
    # <bos> 2 7 + 5 8 = 8 5 <eos>
    assert tok.decode(ids[0].tolist()) == "<bos>27+58=85<eos>"
    assert labels[0].tolist() == [-100] * 7 + ids[0, 7:].tolist()
    # Right-padded: <bos> 1 + 2 = 3 <eos> <pad> <pad> <pad>
    assert mask[1].tolist() == [1] * 7 + [0] * 3
    assert labels[1].tolist() == [-100] * 5 + ids[1, 5:7].tolist() + [-100] * 3


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "checkpoint"
    proc = subprocess.run(
        [sys.executable, "-m", "torchneuron.demo", "--quick", "--device", "neuron", "--out", str(out)],
        capture_output=True, text=True, timeout=180, env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, out


def accuracy(label, stdout):
    m = re.search(rf"{label}: ([0-9.]+)% \((\d+)/(\d+) exactly right\)", stdout)
    assert m, f"no '{label}' accuracy line in:\n{stdout}"
    return int(m.group(2)), int(m.group(3))


def test_quick_run_prints_accuracy_before_and_after_training(quick_run):
    stdout, _ = quick_run
    _, n = accuracy("before training", stdout)
    assert n == 64
    accuracy("after training", stdout)
    assert re.search(r"step +40/40 +loss [0-9.]+ .*steps/s", stdout), stdout
    assert re.search(r"generation: \d+ tokens/s", stdout), stdout
    assert "peak device memory" in stdout and "ops copied to the CPU: none" in stdout, stdout


def test_quick_run_saves_a_standard_checkpoint(quick_run):
    _, out = quick_run
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json"):
        assert (out / name).is_file(), name


def test_reloaded_model_scores_as_before_saving(quick_run):
    stdout, _ = quick_run
    m = re.search(r"reloaded onto (\S+): ([0-9.]+)% \((\d+)/(\d+) exactly right\); "
                  r"completions identical", stdout)
    assert m, stdout
    assert m.group(1) == "neuron:0"
    assert (int(m.group(3)), int(m.group(4))) == accuracy("after training", stdout)


def test_checkpoint_loads_with_device_map_neuron(quick_run):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, out = quick_run
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, device_map="neuron")
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.config._attn_implementation == "sdpa"
    assert all(p.device.type == "neuron" for p in model.parameters())
    enc = tok(["1+2=", "12+34="], padding=True, return_tensors="pt").to("neuron")
    with torch.no_grad():
        got = model.generate(**enc, max_new_tokens=4)
    assert got.device.type == "neuron" and got.shape[0] == 2
