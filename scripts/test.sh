#!/usr/bin/env bash
# Runs every test: the C++ suites of runtime/ and kernels/ (plain, ASan+UBSan,
# TSan) and the Python suite. Sets up the machine first if needed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"

JOBS="${TORCHNEURON_BUILD_JOBS:-$(nproc)}"
run_ctest() {  # project folder (runtime, kernels), build dir suffix, sanitizers
  local dir="$ROOT/build/$1$2" var
  var="$([ "$1" = runtime ] && echo NEURONRT_SANITIZE || echo NEURONKERNELS_SANITIZE)"
  step "C++ tests of $1/${3:+ ($3)}"
  cmake -S "$ROOT/$1" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -D"$var"="$3" >/dev/null
  cmake --build "$dir" -j "$JOBS"
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS"
}
for project in runtime kernels; do
  run_ctest "$project" "" ""
  run_ctest "$project" "-asan" "address;undefined"
  run_ctest "$project" "-tsan" "thread"
done

step "Python tests (pytest tests/)"
cd "$ROOT"
"$PY" -m pytest tests/ "$@"
