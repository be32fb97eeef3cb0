#!/usr/bin/env bash
# test.sh - install dependencies, build stpar and run every test.
#
#   scripts/test.sh               # Release build in build/
#   scripts/test.sh --sanitize    # ASan+UBSan build in build-asan/
#
# Phases (each timed): deps, configure, build, test. Tests are the lit +
# FileCheck suite and the GoogleTest unit tests, run together by lit (target
# check-stpar). Results are also written as JUnit XML to
# <build dir>/test-results.xml. Exits non-zero on any failure.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sanitize=OFF
build_dir="$root/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize=ON; build_dir="$root/build-asan" ;;
    --build-dir) build_dir="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# ccache hits across clones in different folders.
export CCACHE_BASEDIR="$root"

phase() {
  local name="$1"; shift
  local start=$SECONDS
  echo "=== phase: $name"
  "$@"
  echo "=== phase: $name done in $((SECONDS - start)) s"
}

phase deps "$root/scripts/install-deps.sh"
phase configure cmake -G Ninja -S "$root" -B "$build_dir" \
  -DCMAKE_BUILD_TYPE=Release \
  -DSTPAR_ENABLE_SANITIZERS="$sanitize" \
  "-DSTPAR_LIT_ARGS=--xunit-xml-output=$build_dir/test-results.xml"
phase build cmake --build "$build_dir" -j 2
phase test cmake --build "$build_dir" --target check-stpar
