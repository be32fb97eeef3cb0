#!/usr/bin/env bash
# fuzz-import.sh - fuzz stpar's ONNX importer with libFuzzer for a bounded time.
#
#   scripts/fuzz-import.sh [SECONDS]     # default 60; e.g. 1800 for 30 min
#
# Installs Clang 22 (install-deps.sh --fuzz), configures build-fuzz/ with
# -DSTPAR_ENABLE_FUZZER=ON (libFuzzer coverage + AddressSanitizer), builds
# stpar-import-fuzzer, seeds it with the torch113_* and ORT models of
# ../shared/models, the file of ../shared/bad-inputs and the small models the
# import tests generate, and runs it for SECONDS on one core. The corpus
# grows in build-fuzz/corpus across runs; crashing inputs land in
# build-fuzz/artifacts/. Prints executions, executions per second, corpus
# size and findings; exits 1 if anything crashed, timed out or ran out of
# memory. Every finding becomes a test (docs/fuzzing.md).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
case "$seconds" in
  -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
  ''|*[!0-9]*) echo "fuzz-import: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;;
esac
build="$root/build-fuzz"
shared="$root/../shared"
export CCACHE_BASEDIR="$root"

"$root/scripts/install-deps.sh" --fuzz
mkdir -p "$build"
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
  -DSTPAR_ENABLE_FUZZER=ON >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target stpar-import-fuzzer -j 2

seeds="$build/seeds"
rm -rf "$seeds"
mkdir -p "$seeds" "$build/corpus" "$build/artifacts"
for m in "$shared"/models/torch113_*/model.onnx "$shared"/models/ort_*.onnx \
         "$shared"/bad-inputs/*.onnx; do
  [ -f "$m" ] && cp "$m" "$seeds/$(basename "$(dirname "$m")")_$(basename "$m")"
done
py=/usr/bin/python3
"$py" "$root/test/Import/ops/Inputs/make_op_models.py" "$seeds/ops" >/dev/null
"$py" "$root/test/Import/errors/Inputs/make_bad_models.py" "$seeds/bad" >/dev/null
"$py" "$root/test/Verify/Inputs/make-contrib-models.py" "$seeds/contrib" >/dev/null
find "$seeds" -mindepth 2 -name '*.onnx' | while read -r f; do
  mv "$f" "$seeds/$(basename "$(dirname "$f")")_$(basename "$f")"
done
find "$seeds" -mindepth 1 -type d -exec rm -rf {} +
echo "fuzz-import: $(ls "$seeds" | wc -l) seed files, corpus $(ls "$build/corpus" | wc -l) files; running ${seconds} s"

log="$build/fuzz.log"
# LLVM's allocators poison memory from inlined, instrumented header code
# that uninstrumented library code then reuses (as in the sanitizer build,
# docs/building.md); leak detection stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:-allow_user_poisoning=0}"
set +e
"$build/bin/stpar-import-fuzzer" -max_total_time="$seconds" -timeout=20 \
  -rss_limit_mb=4096 -max_len=262144 -print_final_stats=1 \
  -artifact_prefix="$build/artifacts/" "$build/corpus" "$seeds" 2>"$log"
status=$?
set -e
tail -n 25 "$log"
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
files=$(ls "$build/corpus" | wc -l)
bytes=$(du -sb "$build/corpus" | cut -f1)
findings=$(ls "$build/artifacts" | wc -l)
echo "fuzz-import: ${runs:-?} executions in ${seconds} s (${speed:-?} exec/s), corpus ${files} files (${bytes} bytes), findings ${findings} (exit ${status})"
[ "$status" -eq 0 ] && [ "$findings" -eq 0 ]
