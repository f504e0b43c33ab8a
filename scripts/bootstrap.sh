#!/usr/bin/env bash
# Prepares a machine to run torchneuron: Debian build tools, a virtual
# environment with the pinned Python packages, and the native build.
# Idempotent: each step is skipped when already done. Sourced by demo.sh and
# test.sh; run on its own to only set up.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TORCHNEURON_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# The precompiled header is safe to cache across builds of the same tree.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
# Paths relative to the checkout, so a fresh clone elsewhere (CI) hits the
# cache of an earlier one; debug info may then name the other clone's folder.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"

step() { printf '\n\033[1m==> [%d:%02d] %s\033[0m\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }  # [minutes:seconds since the start]

# 1. Debian packages: compiler, CMake, Ninja, ccache, GoogleTest; iproute2 for
#    the test of ranks in separate network namespaces (`ip netns`).
need=()
for pkg in g++ cmake ninja-build ccache libgtest-dev python3-venv iproute2; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  step "Installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
fi

# 2. Python 3.11 virtual environment with the pinned packages.
if [ ! -x "$PY" ]; then
  step "Creating the virtual environment in $VENV"
  PYTHON="${PYTHON:-python3}"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
    echo "torchneuron needs Python 3.11 (torch==2.13.0 CPU wheel); set PYTHON=/path/to/python3.11" >&2
    exit 1
  }
  "$PYTHON" -m venv "$VENV"
fi
req_hash="$(sha256sum "$ROOT/requirements.txt" | cut -c1-16)"
if [ "$(cat "$VENV/.requirements" 2>/dev/null)" != "$req_hash" ]; then
  step "Installing pinned Python packages (requirements.txt)"
  "$PY" -m pip install --progress-bar on -r "$ROOT/requirements.txt"
  echo "$req_hash" > "$VENV/.requirements"
fi

# 3. The native extension (CMake + Ninja + ccache, against the installed torch).
# Reinstalled also when setup.py changed: the package metadata (entry points such as
# torch.compile's backend "neuron") is written only by the install.
setup_hash="$(sha256sum "$ROOT/setup.py" | cut -c1-16)"
if ! "$PY" -c 'import importlib.metadata as m; m.distribution("torchneuron")' >/dev/null 2>&1 \
   || [ ! -f "$ROOT/build/ext/build.ninja" ] \
   || [ "$(cat "$VENV/.torchneuron-setup" 2>/dev/null)" != "$setup_hash" ]; then
  step "Building and installing torchneuron (first build takes a few minutes)"
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PY" -m pip install --no-build-isolation --no-deps -e "$ROOT"
  echo "$setup_hash" > "$VENV/.torchneuron-setup"
else
  step "Building torchneuron (incremental)"
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 cmake --build "$ROOT/build/ext" --target torchneuron_C
fi
