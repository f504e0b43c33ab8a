"""The main job's training script: supervised fine-tuning with TRL, written as
TRL's own example (trl/scripts/sft.py) is, nothing in it about the device.

    accelerate launch --config_file fsdp2.yaml --num_processes 2 -m torchneuron.demo.sft \\
        --model_name_or_path out/demo/base --dataset_name out/demo/data \\
        --output_dir out/demo --learning_rate 3e-3 --max_steps 600 ...

`python -m torchneuron.demo` writes the dataset and the starting checkpoint,
runs this script under `accelerate launch` and evaluates what it saved. The
one addition to TRL's example is the `Report` callback (progress lines,
training tokens per second and peak device memory, for the demo to print).
"""
from datasets import load_dataset
from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser

from .report import Report


def main(script_args, training_args, model_args):
    dataset = load_dataset(script_args.dataset_name, name=script_args.dataset_config)

    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset[script_args.dataset_train_split],
        eval_dataset=dataset[script_args.dataset_test_split] if training_args.eval_strategy != "no" else None,
    )
    trainer.add_callback(Report(trainer))

    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.accelerator.print("Training completed.")

    trainer.save_model(training_args.output_dir)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}.")
    trainer.end()


if __name__ == "__main__":
    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    main(script_args, training_args, model_args)
