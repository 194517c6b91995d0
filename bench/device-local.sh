#!/usr/bin/env bash
# What queuing the scheduler's copies into the head's own GPU saves (datapath/local_inputs.h), in one
# device call (after `device-compare.sh build` and `model`). Before each split ggml copies every
# input from pageable host memory and waits; MiniMax-M3's sparse layers read three inputs through a
# view per layer, so a decode step makes ~4 such copies per layer.
#   1. the GPU tests (tests/datapath/input_writes_test.cpp, tests/datapath/local_inputs_test.cpp);
#   2. tandem-engine one-shot runs of the 60-layer proxy: one process, and the split 30 + 30
#      through a seeded `tandem worker`, each with the queue on and off (`--sync-local-inputs`),
#      and without the input slots (the default; `--no-local-input-slots`, datapath/local_inputs.h;
#      `--no-worker-input-slots`, datapath/rpc_writes.h):
#      ~540-token prompt and 128 tokens (two rounds), ~4000-token prompt and 16 tokens (one).
#      A token digest per run: all of one prompt must agree.
# Run it as `bench/device-compare.sh local`; logs go to $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?run through bench/device-compare.sh local}
build=$root/build-cuda
model=/tmp/m3-proxy.gguf
pids=()
cache=/tmp/local-worker-cache
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$cache"' EXIT

context=8192
. "$root/bench/device-engine.sh"
echo "== GPU tests"
gpu_tests
echo

seeded_worker "$cache" --layers 0-29
for setting in "45 128 2" "330 16 1"; do
  read -r repeats n_predict rounds <<<"$setting"
  prompt=$(sentences "$repeats")
  echo "== tandem-engine one-shot, m3-proxy 60 layers, prompt of $repeats sentences (~$((repeats * 12)) tokens), $n_predict tokens"
  for round in $(seq "$rounds"); do
    engine "one process, queued, no slots (round $round)" --no-local-input-slots
    engine "one process, sync (round $round)" --sync-local-inputs
    split_30_30 "split, queued, no slots (round $round)" --no-local-input-slots --no-worker-input-slots
    split_30_30 "split, sync (round $round)" --sync-local-inputs --no-worker-input-slots
    engine "one process, local slots (round $round)"
    split_30_30 "split, worker slots only (round $round)" --no-local-input-slots
    split_30_30 "split, both slots (round $round)"
  done
done
