#!/usr/bin/env bash
# install-deps.sh - install everything stpar needs from Debian's archive.
#
# Idempotent and non-interactive; safe to run on a fresh Debian 12 (bookworm)
# machine as root (or with sudo available). Facts behind the package choice:
# ../shared/TOOLCHAIN.md.
#
# Besides Debian packages it installs the reference runtime of `stpar verify`
# (docs/verify.md): onnxruntime-node from the npm registry into the
# project-local, git-ignored folder <root>/.deps/node/node_modules (where
# tools/ort-run/ort-run.js looks for it). Its post-install step, which
# downloads GPU libraries from a host these machines cannot reach, is
# skipped; the package ships the CPU execution provider.
set -euo pipefail

# --fuzz: also Clang 22 and its runtime (libFuzzer, sanitizers) for
# scripts/fuzz-import.sh.
fuzz=0
for arg in "$@"; do
  case "$arg" in
    --fuzz) fuzz=1 ;;
    -h|--help) sed -n '2,14p' "$0"; echo "# --fuzz: also clang-22 and libclang-rt-22-dev"; exit 0 ;;
    *) echo "install-deps: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ORT_NODE_VERSION=1.30.0
ort_dir="$root/.deps/node"

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
  # The plan package (python/stpar): its test installs it into a venv.
  python3-venv python3-pip python3-setuptools
  # Independent reference for gradients and updates (stpar verify --train).
  python3-torch
  # The plan page (stpar plan --html) is loaded in headless Chromium by
  # test/Driver/plan-html.test.
  chromium fonts-dejavu-core
)

if [ "$fuzz" = 1 ]; then
  PACKAGES+=(clang-22 libclang-rt-22-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js and npm for the ONNX Runtime reference runner. A node/npm already
# on PATH (e.g. a NodeSource build, whose nodejs bundles npm and conflicts
# with Debian's npm package) is used as is; otherwise Debian's.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  for p in nodejs npm; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
fi

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
else
  echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# onnxruntime-node (stpar verify's reference runtime), project-local.
installed_ort=""
if [ -f "$ort_dir/node_modules/onnxruntime-node/package.json" ]; then
  installed_ort="$(node -p "require('$ort_dir/node_modules/onnxruntime-node/package.json').version" 2>/dev/null || true)"
fi
if [ "$installed_ort" = "$ORT_NODE_VERSION" ]; then
  echo "install-deps: onnxruntime-node $ORT_NODE_VERSION already in $ort_dir"
else
  echo "install-deps: installing onnxruntime-node@$ORT_NODE_VERSION into $ort_dir"
  start=$SECONDS
  mkdir -p "$ort_dir"
  # A package.json of its own, so npm installs here and not into a parent.
  [ -f "$ort_dir/package.json" ] || \
    echo '{"name": "stpar-deps", "private": true}' > "$ort_dir/package.json"
  (cd "$ort_dir" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund \
     --no-package-lock "onnxruntime-node@$ORT_NODE_VERSION" --onnxruntime-node-install=skip)
  node -e "require('$ort_dir/node_modules/onnxruntime-node')" || {
    echo "install-deps: error: onnxruntime-node does not load from $ort_dir" >&2
    exit 1
  }
  echo "install-deps: onnxruntime-node installed in $((SECONDS - start)) s"
fi
echo "install-deps: done"
