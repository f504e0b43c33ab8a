#!/usr/bin/env bash
# The main job: sets up the machine if needed, then fine-tunes a small Qwen3 on
# the `neuron` device (python -m torchneuron.demo): accuracy before and after
# training, a saved and reloaded Transformers checkpoint, tokens per second.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
step "Running the demo (python -m torchneuron.demo)"
exec "$PY" -m torchneuron.demo "$@"
