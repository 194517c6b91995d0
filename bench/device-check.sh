#!/usr/bin/env bash
# A quick GPU correctness check, in one device call after `device-compare.sh build` (about a
# minute; no m3-proxy needed): the GPU tests of the head's queue and the worker's writes, then the
# tokens of three architectures' tiny models (minimax-m3, qwen3moe, glm4moe; PRESETS overrides) in one
# process and split through a tandem worker on the same GPU, the worker's layers first (so that the
# head reads the worker's results, MiniMax-M3's f32 mask cast among them), by default and with each
# engine flag given (default: --no-local-casts). Every run of one model must give the same tokens.
# Then the prompt cache through tandem serve split (bench/prompt-cache-check.sh), again with a q8_0
# KV cache on the minimax-m3 tiny model.
# Run it as `bench/device-compare.sh check [FLAG]`; logs in $OUT.
# SPLIT overrides the split's engine flags (e.g. for a dry run on a CPU build).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?run through bench/device-compare.sh check}
build=${BUILD:-$root/build-cuda}
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT

context=2048
n_predict=24
. "$root/bench/device-engine.sh"
prompt=$(sentences 120)  # ~1300 tokens: three prompt chunks
status=0
echo "== GPU tests (datapath_test's; on a CPU build they skip)"
gpu_tests || status=1
"$build/tandem" secret new -o "$out/cluster.key" >/dev/null
"$build/tandem" worker --listen 127.0.0.1:50070 --secret-file "$out/cluster.key" --name w >"$out/worker.log" 2>&1 & pids+=($!)
sleep 2
"$build/tandem" link forward --to 127.0.0.1:50070 --secret-file "$out/cluster.key" --listen 127.0.0.1:50071 \
  >"$out/forward.log" 2>&1 & pids+=($!)
sleep 1
for preset in ${PRESETS:-tiny tiny-qwen3moe tiny-glm4moe}; do
  model=/tmp/tandem-check-$preset.gguf
  "$build/tandem" synth --preset "$preset" -o "$model" >/dev/null || exit 1
  layers=$(python3 -c "import json,sys; print(json.load(sys.stdin)['n_layer'])" < <("$build/tandem" inspect "$model" --json))
  half=$((layers / 2))
  read -r -a split <<<"${SPLIT:---layer-split $half,$((layers - half)) --workers-first}"
  echo "== $preset ($layers layers), a ~1300-token prompt and $n_predict tokens"
  engine "$preset one process"
  engine "$preset split" --rpc 127.0.0.1:50071 --tandem-worker 127.0.0.1:50071 "${split[@]}"
  for flag in "${@:---no-local-casts}"; do
    engine "$preset split $flag" --rpc 127.0.0.1:50071 --tandem-worker 127.0.0.1:50071 "${split[@]}" "$flag"
  done
done
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
pids=()
echo "== the prompt cache through tandem serve split: a restored state against its slot's own prefix"
"$root/bench/prompt-cache-check.sh" "$out" || status=1
# The shipped example's KV type (q8_0) on MiniMax-M3's graph, its sparse attention's cache included.
echo "== the same with a q8_0 KV cache, the minimax-m3 tiny model"
KV_TYPE=q8_0 PRESETS=tiny "$root/bench/prompt-cache-check.sh" "$out" || status=1
exit "$status"
