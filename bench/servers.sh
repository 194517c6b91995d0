# Sourced by bench/compare.sh and bench/speculation.sh: the comparison's servers, each started from
# the same llama.cpp build on the same model and stopped before the next one.
#   servers_init BUILD_DIR MODEL.gguf  sets $build, $model, $tandem, $llama_bin, $context, $parallel,
#                                      $n_layer, $half, $worker_layers, $threads, $work (a temporary
#                                      folder, removed at exit with every process still running), $key
#   start_config NAME                  starts single, stock-split, stock-split-graphs, stock-split-cache,
#                                      tandem-single, tandem-split or tandem-cold and waits until it
#                                      is ready; sets $url, $load_s and $link_bytes (tandem's only).
#                                      Extra flags: the arrays llama_args (every llama-server),
#                                      llama_split_args (the stock splits' llama-server) and
#                                      tandem_args (every tandem serve), empty unless the caller sets them
#   seed_worker                        fills tandem-split's worker cache from the model file
#   stop_all                           stops every process started, the last first
# Environment: CONTEXT (default 8192, per slot), PARALLEL (slots of every server, default 4), NGL
# (single's -ngl, default 99), SPLIT_MODE (cpu: the head keeps its half on the CPU; gpu: half on
# CUDA0), SPLIT_THREADS (CPU threads of each side of a split; default half the cores),
# CACHE_RAM_MIB (the prompt caches' bound, llama-server's and tandem's; default 0: off),
# TANDEM_SERVE_ARGS (extra `tandem serve` flags).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
stop_all() { for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null || true; wait "${pids[$i]}" 2>/dev/null || true; done; pids=(); }
wait_ready() {  # url; prints seconds from now until /health is ready
  local t0=$(date +%s.%N)
  for _ in $(seq 3000); do
    if curl -sf "$1/health" 2>/dev/null | grep -q -E '"status":"ok"|"state":"ready"'; then
      python3 -c "import time; print(round(time.time() - $t0, 2))"; return 0
    fi
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a process of $1 exited while loading (logs: $work)" >&2; tail -n 20 "$work"/*.log >&2; return 1; }; done
    sleep 0.1
  done
  echo "not ready: $1" >&2; return 1
}

servers_init() {
  build=$(cd "$1" && pwd)
  model=$(readlink -f "$2")
  tandem="$build/tandem"
  llama_bin=$(dirname "$(sed -n 's/^#define TANDEM_LLAMA_SERVER_EXE "\(.*\)"/\1/p' "$build/generated/common/build_info.h")")
  context=${CONTEXT:-8192}
  parallel=${PARALLEL:-4}
  work=$(mktemp -d)
  pids=()
  llama_args=() llama_split_args=() tandem_args=()
  trap 'stop_all; rm -rf "$work"' EXIT
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
}

start_config() {  # name; sets url, load_s, link_bytes
  local name=$1 port rport
  port=$(free_port) rport=$(free_port)
  url="http://127.0.0.1:$port"
  case "$name" in
    single)
      "$llama_bin/llama-server" -m "$model" -ngl "${NGL:-99}" "${llama_common[@]}" --cache-ram "$cache_mib" \
        "${llama_args[@]}" --port "$port" >"$work/$name.log" 2>&1 & pids+=($!) ;;
    stock-split|stock-split-graphs|stock-split-cache)
      local env=() cache=(--cache-ram "$cache_mib")
      [ "$name" = stock-split ] && env=(GGML_CUDA_DISABLE_GRAPHS=1)
      [ "$name" = stock-split-cache ] && cache=(--cache-ram "$([ "$cache_mib" = 0 ] && echo 8192 || echo "$cache_mib")")
      env "${env[@]}" "$llama_bin/ggml-rpc-server" -H 127.0.0.1 -p "$rport" -t "$threads" >"$work/$name-rpc.log" 2>&1 & pids+=($!)
      sleep 1
      env "${env[@]}" "$llama_bin/llama-server" -m "$model" "${stock_split[@]}" "${llama_common[@]}" "${cache[@]}" \
        "${llama_args[@]}" "${llama_split_args[@]}" --port "$port" -t "$threads" --rpc 127.0.0.1:$rport \
        >"$work/$name.log" 2>&1 & pids+=($!) ;;
    tandem-single)  # every layer on this machine: what the split costs inside tandem's own engine
      "$tandem" serve -m "$model" --keys-db "$work/keys.db" --listen 127.0.0.1:$port --context "$context" --parallel "$parallel" \
        --model-id bench "${tandem_cache[@]}" "${tandem_args[@]}" ${TANDEM_SERVE_ARGS:-} >"$work/$name.log" 2>&1 & pids+=($!) ;;
    tandem-split|tandem-cold)
      [ "$name" = tandem-cold ] && rm -rf "$work/worker-cache"
      "$tandem" worker --listen 127.0.0.1:$rport --secret-file "$work/cluster.key" --name worker \
        --cache-dir "$work/worker-cache" --threads "$threads" >"$work/$name-worker.log" 2>&1 & pids+=($!)
      sleep 1
      "$tandem" serve -m "$model" --worker worker=127.0.0.1:$rport --secret-file "$work/cluster.key" --keys-db "$work/keys.db" \
        --listen 127.0.0.1:$port --context "$context" --parallel "$parallel" --model-id bench --layers $half,$((n_layer - half)) \
        -t "$threads" "${tandem_cache[@]}" "${tandem_args[@]}" ${TANDEM_SERVE_ARGS:-} >"$work/$name.log" 2>&1 & pids+=($!) ;;
    *) echo "unknown configuration: $name" >&2; return 1 ;;
  esac
  load_s=$(wait_ready "$url") || return 1
  link_bytes=0
  case "$name" in tandem-*)
    link_bytes=$(curl -sf -H "Authorization: Bearer $key" "$url/health" | python3 -c 'import json,sys; print(sum(n["bytes_to_worker"] for n in json.load(sys.stdin)["nodes"]))') ;;
  esac
}

# The cold load cached what ggml caches (weights above 10 MiB); seeding from the worker's own copy
# adds the rest above tandem's 1 MiB, as docs/worker.md has users do. Without a cold load first it
# fills the cache from empty.
seed_worker() { "$tandem" worker seed -m "$model" --cache-dir "$work/worker-cache" --layers "$worker_layers" >&2; }
