#!/usr/bin/env bash
# What each step's input writes cost a split on one GPU, in one device call (after
# `device-compare.sh build` and `model`). MiniMax-M3's graph reads three small inputs per layer,
# which ggml's scheduler copies to the worker every token, one RPC write each (~100 per token for
# 30 layers); datapath/rpc_writes.h queues them on the head, datapath/input_writes.h in the RPC child.
#   1. the GPU tests of the child's queued writes (tests/datapath/input_writes_test.cpp, built here
#      by hand: the device build has no test tree);
#   2. tandem-engine one-shot runs (540-token prompt, 256 tokens, greedy) of the 60-layer proxy:
#      one process, and the split 30 + 30 through a seeded `tandem worker` with the head's and the
#      child's writes each queued or one at a time. A text digest per run: the four splits must
#      agree token for token.
# Run it as `bench/device-compare.sh writes`; logs go to $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?run through bench/device-compare.sh writes}
build=$root/build-cuda
bin=$(dirname "$(sed -n 's/^#define TANDEM_LLAMA_SERVER_EXE "\(.*\)"/\1/p' "$build/generated/common/build_info.h")")
model=/tmp/m3-proxy.gguf
sysroot=/tmp/tandem-dev/sysroot
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT

. "$root/bench/device-engine.sh"
echo "== GPU tests of the child's queued writes"
gpu_tests
echo
cache=/tmp/writes-worker-cache
"$build/tandem" worker seed -m "$model" --cache-dir "$cache" --layers 0-29 >"$out/seed.log" 2>&1 || { cat "$out/seed.log"; exit 1; }
find "$cache" -maxdepth 1 -type f -printf '%f %s\n' | grep -E '^[0-9a-f]+ [0-9]+$' >"$out/listing.txt"
"$build/tandem" secret new -o "$out/cluster.key" >/dev/null
start_worker() {  # port, extra worker flags...
  local port=$1; shift
  "$build/tandem" worker --listen 127.0.0.1:$port --secret-file "$out/cluster.key" --name w$port --cache-dir "$cache" "$@" \
    >"$out/worker-$port.log" 2>&1 & pids+=($!)
  sleep 2
  "$build/tandem" link forward --to 127.0.0.1:$port --secret-file "$out/cluster.key" --listen 127.0.0.1:$((port + 1)) \
    >"$out/forward-$port.log" 2>&1 & pids+=($!)
}
start_worker 50070
start_worker 50080 --sync-input-writes
sleep 1

split() {  # label, worker port, engine flags...
  local label=$1 port=$2; shift 2
  local ep=127.0.0.1:$((port + 1))
  # The input slots off: with them most writes are gone, and --sync-rpc-writes turns them off.
  engine "$label" --rpc $ep --worker-cache $ep="$out/listing.txt" --layer-split 30,30 --workers-first --no-worker-input-slots "$@"
}
echo "== tandem-engine one-shot, m3-proxy 60 layers, 256 tokens after 540"
for round in 1 2 3; do
  engine "one process (round $round)"
  split "split, both queued (round $round)" 50070
  split "split, head waits (round $round)" 50070 --sync-rpc-writes
  split "split, child waits (round $round)" 50080
  split "split, both wait, as ggml (round $round)" 50080 --sync-rpc-writes
done
grep -h "cached weights" "$out"/worker-*.log | tail -2
