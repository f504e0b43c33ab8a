#!/usr/bin/env bash
# Runs every test: the C++ suites of runtime/, kernels/, compiler/ and collectives/ (plain,
# ASan+UBSan, TSan; the kernels' and the compiler's suites at every instruction-set level this
# CPU runs), the check that no test binary has ISA code outside the kernels' and the
# compiler's ISA namespaces (or target_clones clones above their own level),
# and the Python suite, whose tests of the device's own kernels run again at
# each level below the CPU's best. Sets up the machine first if needed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"

JOBS="${TORCHNEURON_BUILD_JOBS:-$(nproc)}"
# The torch-free libraries, by folder. Each folder defines its library with
# torch_free_library(<name> ...) (cmake/TorchFreeLibrary.cmake), whose
# sanitizer option is named after the library: <NAME>_SANITIZE.
TORCH_FREE_FOLDERS=(runtime kernels compiler collectives)
sanitize_option() {  # project folder
  local name
  name="$(sed -n 's/^torch_free_library(\([A-Za-z0-9_]*\).*/\1/p' "$ROOT/$1/CMakeLists.txt")"
  [ -n "$name" ] || { echo "$1/CMakeLists.txt defines no torch_free_library()" >&2; exit 1; }
  echo "${name^^}_SANITIZE"
}
run_ctest() {  # project folder (one of TORCH_FREE_FOLDERS), build dir suffix, sanitizers
  local dir="$ROOT/build/$1$2" var
  var="$(sanitize_option "$1")"
  step "C++ tests of $1/${3:+ ($3)}"
  cmake -S "$ROOT/$1" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -D"$var"="$3" >/dev/null
  cmake --build "$dir" -j "$JOBS"
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS"
}
for project in "${TORCH_FREE_FOLDERS[@]}"; do
  run_ctest "$project" "" ""
  run_ctest "$project" "-asan" "address;undefined"
  run_ctest "$project" "-tsan" "thread"
done

step "No instructions above baseline outside the ISA namespaces (test binaries)"
python3 "$ROOT/kernels/tools/check_isa_leaks.py" "$ROOT"/build/runtime*/neuronrt_tests \
  "$ROOT"/build/kernels*/neuronkernels_tests "$ROOT"/build/compiler*/neuroncompiler_tests \
  "$ROOT"/build/collectives*/neuroncoll_tests

# pytest-xdist runs the suite in TORCHNEURON_TEST_WORKERS processes (0: in
# this one); tests/conftest.py keeps each file's tests in one worker, except
# the conformance suites', which spread test by test.
WORKERS="${TORCHNEURON_TEST_WORKERS:-0}"
step "Python tests (pytest tests/, $WORKERS workers)"
cd "$ROOT"
"$PY" -m pytest tests/ -n "$WORKERS" --dist loadgroup --durations=25 "$@"

# The kernels' Python tests at every lower level (TORCHNEURON_ISA forces it),
# unless pytest was given its own arguments.
if (($# == 0)); then
  levels="$("$PY" -c 'import torchneuron; print(" ".join(torchneuron.supported_kernel_isas()[:-1]))')"
  for level in $levels; do
    step "Python tests of the device's kernels at TORCHNEURON_ISA=$level"
    TORCHNEURON_ISA="$level" "$PY" -m pytest tests/test_argmax.py tests/test_attention.py tests/test_matmul.py \
      tests/test_rnn.py tests/test_isa.py -q
  done
fi
