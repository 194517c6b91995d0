#!/usr/bin/env bash
# Where a split on one GPU loses decode speed, in one device call (after `device-compare.sh build`):
# a 12-layer m3-proxy (written here, ~10 s), then
#   - llama-bench (tg256, no sampling, low noise): one process with CUDA graphs on and off, and
#     the stock split (RPC device first, 6 + 6 layers) with graphs on or off on each side;
#   - tandem-engine one-shot runs (sampling included): one process, the split against a stock
#     ggml-rpc-server, and the split through `tandem worker` + `tandem link forward`.
# Prints one line per run; logs go to $OUT. bench/results/2026-12-02-h200-workers-first/README.md
# has the first results of this kind and what they showed. Run it as
#   bench/device-compare.sh diag [LAYERS]
# which sets up the environment of the device build.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?run through bench/device-compare.sh diag}
build=$root/build-cuda
bin=$(dirname "$(sed -n 's/^#define TANDEM_LLAMA_SERVER_EXE "\(.*\)"/\1/p' "$build/generated/common/build_info.h")")
layers=${1:-12}
half=$((layers / 2))
model=/tmp/m3-proxy-$layers.gguf
[ "$layers" = 60 ] && model=/tmp/m3-proxy.gguf  # the full proxy, as `device-compare.sh model` writes it
[ -f "$model" ] || "$build/tandem" synth --preset m3-proxy --layers "$layers" -o "$model" >"$out/synth.log" 2>&1
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT

# RPC servers: graphs on (A) and off (B); a tandem worker and its forwarder.
"$bin/ggml-rpc-server" -H 127.0.0.1 -p 50061 >"$out/rpc-graphs.log" 2>&1 & pids+=($!)
GGML_CUDA_DISABLE_GRAPHS=1 "$bin/ggml-rpc-server" -H 127.0.0.1 -p 50062 >"$out/rpc-nographs.log" 2>&1 & pids+=($!)
"$build/tandem" secret new -o "$out/cluster.key" >/dev/null
"$build/tandem" worker --listen 127.0.0.1:50070 --secret-file "$out/cluster.key" --name w \
  --cache-dir /tmp/diag-worker-cache >"$out/worker.log" 2>&1 & pids+=($!)
sleep 2
"$build/tandem" link forward --to 127.0.0.1:50070 --secret-file "$out/cluster.key" --listen 127.0.0.1:50071 \
  >"$out/forward.log" 2>&1 & pids+=($!)
sleep 1

bench() {  # label, env..., -- llama-bench args
  local label=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local tps
  tps=$(env "${envs[@]}" "$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 0 -n 256 -r 3 -o json "$@" 2>>"$out/llama-bench.log" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.1f ± %.1f" % (r[-1]["avg_ts"], r[-1]["stddev_ts"]))' 2>/dev/null)
  printf '%-48s %s tok/s\n' "$label" "${tps:-FAILED}"
}
prompt=$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog and keeps running'] * 45))")
engine() {  # label, env..., -- engine args
  local label=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local f="$out/engine-${label// /_}.json"
  env "${envs[@]}" "$build/tandem-engine" engine -m "$model" -c 4096 --prompt "$prompt" -n 256 --ignore-eos --json "$@" \
    >"$f" 2>>"$out/engine.log"
  python3 - "$label" "$f" <<'PY'
import json, sys
label, path = sys.argv[1], sys.argv[2]
try:
    j = json.load(open(path))
    print(f"{label:48s} {j['decode_tps']:.1f} tok/s decode, {j['prefill_tps']:.0f} prefill, load {j['load_s']:.1f} s")
except Exception:
    print(f"{label:48s} FAILED")
PY
}

echo "== llama-bench, tg256"
bench "one process, graphs on" --
bench "one process, graphs off" GGML_CUDA_DISABLE_GRAPHS=1 --
bench "stock split, graphs on both sides" -- -rpc 127.0.0.1:50061 -ts $half/$((layers - half))
bench "stock split, graphs off on the head only" GGML_CUDA_DISABLE_GRAPHS=1 -- -rpc 127.0.0.1:50061 -ts $half/$((layers - half))
bench "stock split, graphs off on the RPC server only" -- -rpc 127.0.0.1:50062 -ts $half/$((layers - half))
bench "stock split, graphs off on both sides" GGML_CUDA_DISABLE_GRAPHS=1 -- -rpc 127.0.0.1:50062 -ts $half/$((layers - half))
echo "== tandem-engine one-shot, 256 tokens after 540"
for round in 1 2; do
  engine "one process (round $round)" --
  engine "split, stock RPC server (round $round)" -- --rpc 127.0.0.1:50061 --layer-split $((layers - half)),$half --workers-first
  engine "split, tandem worker (round $round)" -- --rpc 127.0.0.1:50071 --layer-split $((layers - half)),$half --workers-first
done
grep -h "session ended after [1-9]" "$out/worker.log" | sed 's/.*session ended/worker session/'
