#!/usr/bin/env bash
# The side-by-side comparison of the benchmark method (BENCH.md), from one build on one model:
#   single             llama-server, one process
#   stock-split        llama-server --rpc -> ggml-rpc-server, layers halved, CUDA graphs off (the hand-made recipe)
#   stock-split-graphs the same with CUDA graphs on
#   tandem-split       tandem serve + tandem worker, the same split
# Each configuration is started, measured with `tandem bench` and stopped in turn, ROUNDS times
# interleaved. Writes bench/results/<date>-<machine>/{results.json,results.md,results.svg}.
#
#   bench/compare.sh BUILD_DIR MODEL.gguf [ROUNDS]
# Environment: COMMIT (what results.json names; default: `git describe` of this tree, which on the
# lent GPU machine can be a stale copy's), BENCH_ARGS (extra `tandem bench` flags, e.g. small sizes for CPU), CONTEXT (default
# 8192, per slot), PARALLEL (slots of every server, default 4; 16 for `--concurrency 4,16`), MACHINE (name in the results folder, default: hostname), NGL (single's -ngl, default 99),
# SPLIT_MODE (cpu: the head keeps its half on the CPU; gpu: half on CUDA0), BANDWIDTH (bytes/s of
# the device, for the physical limit; default 4.8e12, an H200), TANDEM_SERVE_ARGS (extra `tandem
# serve` flags), SKIP_COLD (skip the cold load; the worker's cache is then seeded from empty),
# SPLIT_THREADS (CPU threads of each side of a split; default half the cores), CONFIGS (which
# configurations, default all four; `tandem-single`, tandem serve with every layer on this
# machine, and `stock-split-cache`, the best stock split with llama-server's prompt cache, may be
# added), CACHE_RAM_MIB (the prompt caches' bound, llama-server's and tandem's; default 0: off), LOAD_ONLY (start each configuration and print its load time,
# no measurement and no results folder: for working on the load).
# tandem-split's worker keeps a weight cache: round 1 first starts it with the cache empty
# ("tandem-cold": load time and link bytes only), then seeds it (`tandem worker seed`), and every
# tandem-split start is seeded. The servers are started and stopped by bench/servers.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/bench/servers.sh"
servers_init "${1:?usage: compare.sh BUILD_DIR MODEL.gguf [ROUNDS]}" "${2:?model}"
rounds=${3:-1}
machine=${MACHINE:-$(hostname)}
out="$here/bench/results/$(date +%Y-%m-%d)-$machine"
mkdir -p "$out"

results="$work/runs.jsonl"
: > "$results"
for round in $(seq "$rounds"); do
  if [ "$round" = 1 ]; then
    if [ -z "${SKIP_COLD:-}" ]; then
      echo "compare: round 1: tandem-cold (load only)" >&2
      start_config tandem-cold
      echo "{\"config\":\"tandem-cold\",\"round\":1,\"load_s\":$load_s,\"link_bytes\":$link_bytes}" >> "$work/runs.jsonl"
      cp "$work/tandem-cold.log" "$work/tandem-cold-worker.log" "$out/" 2>/dev/null || true
      stop_all
    fi
    seed_worker
  fi
  for name in ${CONFIGS:-single stock-split stock-split-graphs tandem-split}; do
    echo "compare: round $round: $name" >&2
    start_config "$name"
    if [ -n "${LOAD_ONLY:-}" ]; then
      echo "compare: $name loaded in $load_s s, $link_bytes link bytes" >&2
      last=$((${#pids[@]} - 1))
      kill "${pids[$last]}" 2>/dev/null; wait "${pids[$last]}" 2>/dev/null; unset "pids[$last]"
      sleep 1.5  # the worker's lines on the session come once its head has gone
      grep -h -E "loaded from the workers|cached weights|session ended" "$work/$name"*.log >&2 || true
      stop_all
      continue
    fi
    "$tandem" bench --json --url "$url" --key "$key" --model bench ${BENCH_ARGS:-} > "$work/bench.json"
    python3 -c "import json,sys; b=json.load(open('$work/bench.json')); print(json.dumps({'config':'$name','round':$round,'load_s':$load_s,'link_bytes':$link_bytes,'bench':b}))" >> "$results"
    [ "$round" = 1 ] && for f in "$work/$name"*.log; do cp "$f" "$out/"; done
    stop_all
  done
done

[ -n "${LOAD_ONLY:-}" ] && exit 0
"$tandem" inspect --json "$model" > "$work/model.json"
python3 "$here/bench/report.py" "$results" "$work/model.json" "$out" "${COMMIT:-$(git -C "$here" describe --always --abbrev=40 --dirty)}" "$machine"
echo "compare: results in $out" >&2
