#!/usr/bin/env bash
# The main job: sets up the machine if needed, then fine-tunes a small Qwen3 chat
# model with TRL's SFTTrainer on two neuron cores (FSDP2 through accelerate launch;
# python -m torchneuron.demo): accuracy before and after training, a saved
# Transformers checkpoint reloaded on CPU and on neuron, tokens per second.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
step "Running the demo (python -m torchneuron.demo)"
exec "$PY" -m torchneuron.demo "$@"
