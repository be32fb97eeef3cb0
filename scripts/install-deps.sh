#!/usr/bin/env bash
# install-deps.sh - install everything stpar needs from Debian's archive.
#
# Idempotent and non-interactive; safe to run on a fresh Debian 12 (bookworm)
# machine as root (or with sudo available). Facts behind the package choice:
# ../shared/TOOLCHAIN.md.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
  # Build tools.
  cmake ninja-build g++ ccache git pkg-config
  # LLVM/MLIR 22 (bookworm-security) and the -dev packages its CMake exports need.
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  libzstd-dev libcurl4-openssl-dev libedit-dev
  # ONNX + protobuf.
  libonnx-dev libprotobuf-dev protobuf-compiler
  # ONNX node tests (conformance of the importer).
  libonnx-testdata
  # Formatting and JSON.
  libfmt-dev nlohmann-json3-dev
  # Tests.
  libgtest-dev libgmock-dev googletest
  # MPI for the CPU twin of the emitted program.
  libopenmpi-dev openmpi-bin
  # Model-zoo generator (python/stpar-zoo; runs on /usr/bin/python3).
  python3-onnx python3-numpy
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
