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
# tandem-split start is seeded.
set -euo pipefail
build=$(cd "${1:?usage: compare.sh BUILD_DIR MODEL.gguf [ROUNDS]}" && pwd)
model=$(readlink -f "${2:?model}")
rounds=${3:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
tandem="$build/tandem"
llama_bin=$(dirname "$(sed -n 's/^#define TANDEM_LLAMA_SERVER_EXE "\(.*\)"/\1/p' "$build/generated/common/build_info.h")")
context=${CONTEXT:-8192}
parallel=${PARALLEL:-4}
machine=${MACHINE:-$(hostname)}
out="$here/bench/results/$(date +%Y-%m-%d)-$machine"
work=$(mktemp -d)
mkdir -p "$out"
pids=()
stop_all() { for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null || true; wait "${pids[$i]}" 2>/dev/null || true; done; pids=(); }
trap 'stop_all; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_ready() {  # url; prints seconds from now until /health is ready
  local t0=$(date +%s.%N)
  for _ in $(seq 3000); do
    if curl -sf "$1/health" 2>/dev/null | grep -q -E '"status":"ok"|"state":"ready"'; then
      python3 -c "import time; print(round(time.time() - $t0, 2))"; return 0
    fi
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a process of $1 exited while loading (logs: $work)" >&2; tail -20 "$work"/*.log >&2; return 1; }; done
    sleep 0.1
  done
  echo "not ready: $1" >&2; return 1
}
n_layer=$("$tandem" inspect --json "$model" | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_layer"])')
half=$((n_layer / 2))
# The stock split: on a GPU head, every layer offloaded and split 1:1 between CUDA0 and the RPC
# device; on a CPU head, the first half stays on the CPU and the rest goes to the RPC server.
# tandem-split places the same layers: `--layers HEAD,WORKER` gives a GPU head the last layers
# (workers first, as llama.cpp orders RPC devices) and a CPU head the first ones.
if [ "${SPLIT_MODE:-cpu}" = gpu ]; then
  stock_split=(-ngl 99 -ts 1,1)
  worker_layers="0-$((n_layer - half - 1))"
else
  stock_split=(-ngl $((n_layer - half + 1)))
  worker_layers="$half-$((n_layer - 1))"
fi
# Both halves of a split share this machine; each gets half of its cores, as if each had a box of
# its own (otherwise the two sides' threads fight over the same cores: ggml-rpc-server's default is
# half the cores, llama-server's and tandem's one per physical core). single keeps its default.
threads=${SPLIT_THREADS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}
"$tandem" secret new -o "$work/cluster.key" >/dev/null
key=$("$tandem" keys --db "$work/keys.db" create --name bench 2>/dev/null)

# Prompt caches: llama-server's (--cache-ram, 8 GiB by default) copies a slot's KV state to host
# memory whenever a new prompt takes that slot over, inside the request (~500 MB for a 4096-token
# prompt of m3-proxy, read over RPC in the stock splits); tandem's saves a slot's state as soon as
# it idles, which delays a request sent right after the last one ended. No prompt of the standard
# figures is ever sent twice, so both run without their cache (CACHE_RAM_MIB=0) unless a run asks:
# the prompt cache's own run (`device-compare.sh prompt-cache`) gives them the same bound, and
# `stock-split-cache` is the best stock split (graphs on) with llama-server's cache at that bound.
cache_mib=${CACHE_RAM_MIB:-0}
llama_common=(-c $((context * parallel)) -np "$parallel" --fit off -fa on --no-warmup --alias bench)
tandem_cache=(--prompt-cache "$([ "$cache_mib" = 0 ] && echo 0 || echo "${cache_mib}MiB")")
start_config() {  # name; sets url, load_s
  local name=$1 port rport
  port=$(free_port) rport=$(free_port)
  url="http://127.0.0.1:$port"
  case "$name" in
    single)
      "$llama_bin/llama-server" -m "$model" -ngl "${NGL:-99}" "${llama_common[@]}" --cache-ram "$cache_mib" \
        --port "$port" >"$work/$name.log" 2>&1 & pids+=($!) ;;
    stock-split|stock-split-graphs|stock-split-cache)
      local env=() cache=(--cache-ram "$cache_mib")
      [ "$name" = stock-split ] && env=(GGML_CUDA_DISABLE_GRAPHS=1)
      [ "$name" = stock-split-cache ] && cache=(--cache-ram "$([ "$cache_mib" = 0 ] && echo 8192 || echo "$cache_mib")")
      env "${env[@]}" "$llama_bin/ggml-rpc-server" -H 127.0.0.1 -p "$rport" -t "$threads" >"$work/$name-rpc.log" 2>&1 & pids+=($!)
      sleep 1
      env "${env[@]}" "$llama_bin/llama-server" -m "$model" "${stock_split[@]}" "${llama_common[@]}" "${cache[@]}" \
        --port "$port" -t "$threads" --rpc 127.0.0.1:$rport >"$work/$name.log" 2>&1 & pids+=($!) ;;
    tandem-single)  # every layer on this machine: what the split costs inside tandem's own engine
      "$tandem" serve -m "$model" --keys-db "$work/keys.db" --listen 127.0.0.1:$port --context "$context" --parallel "$parallel" \
        --model-id bench "${tandem_cache[@]}" ${TANDEM_SERVE_ARGS:-} >"$work/$name.log" 2>&1 & pids+=($!) ;;
    tandem-split|tandem-cold)
      [ "$name" = tandem-cold ] && rm -rf "$work/worker-cache"
      "$tandem" worker --listen 127.0.0.1:$rport --secret-file "$work/cluster.key" --name worker \
        --cache-dir "$work/worker-cache" --threads "$threads" >"$work/$name-worker.log" 2>&1 & pids+=($!)
      sleep 1
      "$tandem" serve -m "$model" --worker worker=127.0.0.1:$rport --secret-file "$work/cluster.key" --keys-db "$work/keys.db" \
        --listen 127.0.0.1:$port --context "$context" --parallel "$parallel" --model-id bench --layers $half,$((n_layer - half)) \
        -t "$threads" "${tandem_cache[@]}" ${TANDEM_SERVE_ARGS:-} >"$work/$name.log" 2>&1 & pids+=($!) ;;
  esac
  load_s=$(wait_ready "$url")
  link_bytes=0
  case "$name" in tandem-*)
    link_bytes=$(curl -sf -H "Authorization: Bearer $key" "$url/health" | python3 -c 'import json,sys; print(sum(n["bytes_to_worker"] for n in json.load(sys.stdin)["nodes"]))') ;;
  esac
}

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
    # The cold load cached what ggml caches (weights above 10 MiB); seeding from the worker's own
    # copy adds the rest above tandem's 1 MiB, as docs/worker.md has users do.
    "$tandem" worker seed -m "$model" --cache-dir "$work/worker-cache" --layers "$worker_layers" >&2
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
