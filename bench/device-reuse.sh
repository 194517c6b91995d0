#!/usr/bin/env bash
# What sending repeated inputs once saves a split's prompt processing on one GPU, in one device call
# (after `device-compare.sh build` and `model`). MiniMax-M3's sparse attention reads its position
# mask and block bias through a view in every layer, and ggml's scheduler copies each view to the
# worker: for a 512-token chunk, 512 × positions × 4 bytes per worker layer. To a tandem worker
# the head sends them once per step (datapath/input_reuse.h).
#   1. the GPU tests of the RPC child's queued writes and reuse slots (tests/datapath/input_writes_test.cpp);
#   2. tandem-engine one-shot runs of the 60-layer proxy, prompts of ~540 and ~4000 tokens, 32
#      tokens after them: one process, and the split 30 + 30 through a seeded `tandem worker` with
#      input reuse on and off (`--no-input-reuse`), the input slots off (they take the repeats
#      that fit; reuse serves the rest). A token digest per run: all must agree.
# Run it as `bench/device-compare.sh reuse`; logs go to $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?run through bench/device-compare.sh reuse}
build=$root/build-cuda
model=/tmp/m3-proxy.gguf
pids=()
cache=/tmp/reuse-worker-cache
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$cache"' EXIT

context=8192
n_predict=32
. "$root/bench/device-engine.sh"
echo "== GPU tests of the RPC child's queued writes and reuse slots"
gpu_tests
echo

seeded_worker "$cache" --layers 0-29
for repeats in 45 330; do
  prompt=$(sentences "$repeats")
  echo "== tandem-engine one-shot, m3-proxy 60 layers, prompt of $repeats sentences (~$((repeats * 12)) tokens), 32 tokens"
  for round in 1 2; do
    engine "one process (round $round)"
    split_30_30 "split, reuse (round $round)" --no-worker-input-slots
    split_30_30 "split, no reuse (round $round)" --no-input-reuse --no-worker-input-slots
  done
done
grep -h "session ended after [1-9]" "$out/worker.log" | sed 's/.*session ended/worker session/' | tail -4
