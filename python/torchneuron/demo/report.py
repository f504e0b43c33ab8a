"""What the training script reports to the demo: a Trainer callback that, at
the end of training, writes `train_report.json` into the output directory
(main process): training tokens per second (TRL's `num_tokens`, the
non-padding tokens of every process, over the Trainer's `train_runtime`),
each process's device and peak device memory, and the logged losses."""
import json
import os

import torch
from transformers import TrainerCallback

REPORT = "train_report.json"


class Report(TrainerCallback):
    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_end(self, args, state, control, **kwargs):
        accelerator = self.trainer.accelerator
        device = accelerator.device
        peak = torch.accelerator.max_memory_allocated(device) if device.type != "cpu" else 0
        peaks = accelerator.gather(torch.tensor([peak], device=device)).tolist()
        if not state.is_world_process_zero:
            return
        logs = state.log_history
        tokens = max((h["num_tokens"] for h in logs if "num_tokens" in h), default=0)
        runtime = next(h["train_runtime"] for h in reversed(logs) if "train_runtime" in h)
        report = {
            "steps": state.global_step,
            "processes": accelerator.num_processes,
            "distributed_type": str(accelerator.distributed_type).split(".")[-1],
            "mixed_precision": accelerator.mixed_precision,
            "device": str(device),
            "train_tokens": tokens,
            "train_runtime": runtime,
            "tokens_per_second": tokens / runtime,
            "peak_memory_bytes": peaks,
            "losses": [(h["step"], h["loss"]) for h in logs if "loss" in h],
        }
        os.makedirs(args.output_dir, exist_ok=True)
        with open(os.path.join(args.output_dir, REPORT), "w") as f:
            json.dump(report, f, indent=1)
