#!/usr/bin/env bash
# CUDA-graphs soak of a split: the head (tandem engine, CUDA0) and a worker (same GPU) share the
# tiny model's layers. SERVER=tandem (default): `tandem worker` behind `tandem link forward`, our
# split; SERVER=stock: llama.cpp's ggml-rpc-server straight. RUNS generations of TOKENS tokens each go through the split with
# CUDA graphs on, while the server's GPU memory and RSS are sampled after every run. Then decode
# speed with graphs on and off, for comparison. Writes a log to OUT (default: soak/).
#   bench/gpu-soak.sh BUILD_DIR [RUNS] [TOKENS]
set -euo pipefail
build=${1:?usage: gpu-soak.sh BUILD_DIR [RUNS] [TOKENS]}
runs=${2:-10} tokens=${3:-2000}
out=${OUT:-soak}
mkdir -p "$out"
tandem="$build/tandem"
rpc_server=$(ls "$TANDEM_CACHE"/build/*/bin/ggml-rpc-server | head -1)
model=/tmp/soak-tiny.gguf
[ -f "$model" ] || "$tandem" synth --preset tiny -o "$model" >/dev/null
port=50591

mode=${SERVER:-tandem}
[ -f /tmp/soak.key ] || "$tandem" secret new -o /tmp/soak.key >/dev/null
start_server() {
  if [ "$mode" = stock ]; then
    env "$@" "$rpc_server" -H 127.0.0.1 -p $port >"$out/rpc-server.log" 2>&1 &
    server_pid=$!
  else
    local graphs=""
    [ $# -gt 0 ] && graphs=--no-cuda-graphs
    "$tandem" worker --listen 127.0.0.1:7070 --secret-file /tmp/soak.key --name soak $graphs >"$out/worker.log" 2>&1 &
    worker_pid=$!
    sleep 1
    "$tandem" link forward --to 127.0.0.1:7070 --listen 127.0.0.1:$port --secret-file /tmp/soak.key >"$out/forward.log" 2>&1 &
    forward_pid=$!
    server_pid=
  fi
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && return; sleep 0.1; done
  echo "rpc server did not start" >&2; exit 1
}
stop_server() {
  kill ${server_pid:-} ${forward_pid:-} ${worker_pid:-} 2>/dev/null || true
  wait 2>/dev/null || true
  server_pid= forward_pid= worker_pid=
}
sample() {  # run, decode tok/s
  local gpu rss
  # With a tandem worker the RPC server is its child: the GPU process left once the engine exits.
  [ -n "$server_pid" ] || server_pid=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sort -t, -k2 -nr | head -1 | cut -d, -f1)
  gpu=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', ' -v p=$server_pid '$1==p {print $2}')
  rss=$(awk '/VmRSS/ {print $2}' /proc/$server_pid/status)
  echo "$1 $2 ${gpu:-?} $rss" | tee -a "$out/soak.txt"
}
generate() {
  "$build/tandem-engine" engine -m "$model" -p "Soak test run $1" -n "$tokens" -c $((tokens + 64)) --ignore-eos --json \
    --rpc 127.0.0.1:$port --layer-split 2,2 | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["decode_tps"],1))'
}

echo "run decode_tps server_gpu_MiB server_rss_KiB" | tee "$out/soak.txt"
start_server
for i in $(seq "$runs"); do sample "$i" "$(generate "$i")"; done
stop_server

echo "graphs decode_tps" | tee "$out/graphs.txt"
start_server
echo "on $(generate on)" | tee -a "$out/graphs.txt"
stop_server
start_server GGML_CUDA_DISABLE_GRAPHS=1
echo "off $(GGML_CUDA_DISABLE_GRAPHS=1 generate off)" | tee -a "$out/graphs.txt"
stop_server
