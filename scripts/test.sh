#!/usr/bin/env bash
# Runs every test: the runtime's C++ suite (plain, ASan+UBSan, TSan) and the
# Python suite. Sets up the machine first if needed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"

JOBS="${TORCHNEURON_BUILD_JOBS:-$(nproc)}"
run_ctest() {  # name, sanitizer
  local dir="$ROOT/build/rt$1"
  step "Runtime C++ tests${1:+ ($2)}"
  cmake -S "$ROOT/runtime" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DNEURONRT_SANITIZE="$2" >/dev/null
  cmake --build "$dir" -j "$JOBS"
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS"
}
run_ctest "" ""
run_ctest "-asan" "address;undefined"
run_ctest "-tsan" "thread"

step "Python tests (pytest tests/)"
cd "$ROOT"
"$PY" -m pytest tests/ "$@"
