#!/usr/bin/env bash
# How a split's cost per token on one GPU grows with the worker's share of the layers, in one
# device call (after `device-compare.sh build`). A 24-layer m3-proxy (written here), its layers
# seeded into a worker's cache, then tandem-engine one-shot runs (540-token prompt, 256 tokens,
# greedy): one process, and splits with 4, 12 and 20 layers on the worker (the rest on the head's
# GPU). The head writes ~3 small inputs per worker layer every token (bench/device-writes.sh),
# while the hand-over between the two processes happens twice per token whatever the share: a
# cost that grows with the worker's layers is the writes', a constant one the hand-over's.
# Run it as `bench/device-compare.sh placement`; logs go to $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?run through bench/device-compare.sh placement}
build=$root/build-cuda
layers=24
model=/tmp/m3-proxy-$layers.gguf
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT

[ -f "$model" ] || "$build/tandem" synth --preset m3-proxy --layers $layers -o "$model" >"$out/synth.log" 2>&1
. "$root/bench/device-engine.sh"
seeded_worker /tmp/placement-worker-cache
ep=127.0.0.1:50071
echo "== tandem-engine one-shot, m3-proxy $layers layers, 256 tokens after 540"
for round in 1 2; do
  engine "one process (round $round)"
  for w in 4 12 20; do
    engine "worker $w layers (round $round)" --rpc $ep --worker-cache $ep="$out/listing.txt" \
      --layer-split $w,$((layers - w)) --workers-first
  done
done
