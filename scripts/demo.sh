#!/usr/bin/env bash
# The main job: sets up the machine if needed, then trains a small model on
# the `neuron` device and prints its loss curve and memory summary.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
step "Running the demo (python -m torchneuron.demo)"
exec "$PY" -m torchneuron.demo "$@"
