#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets under ASan + UBSan with clang (tests/fuzz/libfuzzer)
# and runs each for RUNS executions (default 1,000,000) from a copy of its committed seed corpus
# (tests/fuzz/corpus/<target>). Prints one line per target with its execution count; a crash
# stops with the reproducer's path. Usage: scripts/fuzz.sh [BUILD_DIR] [TARGET...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-fuzz}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(openai_request messages_request responses_request engine_protocol config link_handshake gguf step_inputs)
runs=${RUNS:-1000000}
jobs=${JOBS:-$(nproc)}

if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz: installing clang (libFuzzer)" >&2
  sudo=; [ "$(id -u)" -ne 0 ] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends clang >/dev/null
fi
llama_src=$("$root/scripts/obtain-llama.sh")
CC=clang CXX=clang++ cmake -S "$root/tests/fuzz/libfuzzer" -B "$build" -G Ninja -DLLAMA_SOURCE_DIR="$llama_src" >/dev/null
cmake --build "$build" -j "$jobs" --target $(printf '%s_fuzz ' "${targets[@]}")

results=$build/results.txt
: > "$results"
for t in "${targets[@]}"; do
  work=$build/corpus/$t
  mkdir -p "$work" "$build/crashes/$t"
  cp -n "$root/tests/fuzz/corpus/$t/"* "$work/" 2>/dev/null || true
  log=$build/$t.log
  start=$(date +%s)
  if ! "$build/${t}_fuzz" "$work" -runs="$runs" -max_len=65536 -rss_limit_mb=2048 -timeout=20 \
       -artifact_prefix="$build/crashes/$t/" -print_final_stats=1 >"$log" 2>&1; then
    echo "fuzz: $t FAILED; see $log and $build/crashes/$t/" >&2
    grep -E "ERROR|runtime error|SUMMARY" "$log" | head -5 >&2
    exit 1
  fi
  execs=$(grep -oP 'stat::number_of_executed_units: \K[0-9]+' "$log" | tail -1)
  line="$t: $execs executions in $(( $(date +%s) - start )) s, no crash; corpus $(ls "$work" | wc -l) inputs"
  echo "$line" | tee -a "$results"
done
echo "fuzz: every target ran $runs executions without a finding (summary in $results)"
