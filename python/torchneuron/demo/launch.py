"""Runs the training script as users run TRL: `accelerate launch` with an
Accelerate config file (FSDP2, one process per neuron core) and a TRL config
file (the training arguments), both written next to the checkpoint so that
the printed command can be run again by hand."""
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import yaml

# Accelerate's FSDP2 config as `accelerate config` writes it (TRL ships the same,
# trl/accelerate_configs/fsdp2.yaml): every decoder layer its own FSDP unit, the
# full state dict gathered for saving, so the checkpoint is a standard one.
FSDP2 = {
    "compute_environment": "LOCAL_MACHINE",
    "debug": False,
    "distributed_type": "FSDP",
    "downcast_bf16": "no",
    "enable_cpu_affinity": False,
    "fsdp_config": {
        "fsdp_activation_checkpointing": False,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_offload_params": False,
        "fsdp_reshard_after_forward": True,
        "fsdp_state_dict_type": "FULL_STATE_DICT",
        "fsdp_version": 2,
    },
    "machine_rank": 0,
    "main_training_function": "main",
    "mixed_precision": "bf16",
    "num_machines": 1,
    "num_processes": 2,
    "rdzv_backend": "static",
    "same_network": True,
    "use_cpu": False,
}


def write_yaml(path, values):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(values, f, sort_keys=False)
    return path


def free_port():
    """Accelerate's default port (29500) may be held by another job on this host."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(accelerate_config, processes, training_config):
    """The command: `accelerate launch` of `python -m torchneuron.demo.sft`."""
    accelerate = Path(sys.executable).with_name("accelerate")
    launcher = [str(accelerate)] if accelerate.exists() else [sys.executable, "-m", "accelerate.commands.accelerate_cli"]
    return [*launcher, "launch", "--config_file", str(accelerate_config), "--num_processes", str(processes),
            "--main_process_port", str(free_port()), "-m", "torchneuron.demo.sft", "--config",
            str(training_config)]


def one_process(training_config):
    """The command of a run in one process (on CPU, or on one core)."""
    return [sys.executable, "-m", "torchneuron.demo.sft", "--config", str(training_config)]


def show(cmd):
    shown = ["accelerate" if c.endswith("/accelerate") else "python" if c == sys.executable else c for c in cmd]
    return " ".join(shlex.quote(c) for c in shown)


def run(cmd):
    """Runs `cmd` with this process's output (TRL's progress bar and logs show as
    they come); raises if it fails."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"training failed (exit status {proc.returncode}): {show(cmd)}")
