#!/usr/bin/env bash
# Whether a split on one GPU loses its decode to the RPC path or to two processes sharing the GPU,
# in one device call (after `device-compare.sh build`). A 24-layer m3-proxy (written here), then
# tandem-engine one-shot runs (540-token prompt, 256 tokens, greedy): one process; the split 12 + 12
# against a stock ggml-rpc-server in its own process (two CUDA contexts on one GPU); and the same
# split against ggml's RPC server inside the engine (`--rpc-in-process`: the same RPC path over
# loopback, one process, one CUDA context). Two rounds; all runs must give the same tokens. If the
# in-process split decodes like one process, the split's cost on this machine is two contexts
# taking turns on the GPU, which two machines do not have; if like the other split, it is the RPC
# path. Run it as `bench/device-compare.sh contexts`; logs go to $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?run through bench/device-compare.sh contexts}
build=$root/build-cuda
bin=$(dirname "$(sed -n 's/^#define TANDEM_LLAMA_SERVER_EXE "\(.*\)"/\1/p' "$build/generated/common/build_info.h")")
layers=24
model=/tmp/m3-proxy-$layers.gguf
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT

[ -f "$model" ] || "$build/tandem" synth --preset m3-proxy --layers $layers -o "$model" >"$out/synth.log" 2>&1
"$bin/ggml-rpc-server" -H 127.0.0.1 -p 50061 >"$out/rpc.log" 2>&1 & pids+=($!)
sleep 2

. "$root/bench/device-engine.sh"
half=$((layers / 2))
echo "== tandem-engine one-shot, m3-proxy $layers layers, 256 tokens after 540"
for round in $(seq 1 "${ROUNDS:-2}"); do
  engine "one process (round $round)"
  engine "split, RPC server process (round $round)" --rpc 127.0.0.1:50061 --layer-split $half,$half --workers-first
  engine "split, RPC server in-process (round $round)" --rpc 127.0.0.1:50062 --rpc-in-process 127.0.0.1:50062 \
    --layer-split $half,$half --workers-first
done
