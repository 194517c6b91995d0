#!/usr/bin/env bash
# Where a long prompt's split loses to one process on one GPU, in one device call (after
# `device-compare.sh build` and `model`): the GPU tests of the head's queue, then tandem-engine
# one-shot runs of the 60-layer proxy with a ~3960-token prompt (8 micro-batches of 512) and 2
# tokens: one process; the split 30 + 30 through a seeded `tandem worker` (two processes, two CUDA
# contexts on one GPU) as it runs by default, with the head sending each micro-batch's embedding
# rows instead of the worker gathering them (`--no-worker-embedding`), with
# libllama's pipeline parallelism off (`--no-pipeline`), with no two micro-batches' device work
# overlapping (`--no-overlap`), and with the head's input slots off; then the split against ggml's
# RPC server inside the engine (`--rpc-in-process`: one process, one CUDA context), by default and
# with `--no-overlap`. Each split run prints its step trace (TANDEM_STEP_TRACE, summed up by
# bench/trace_summary.py): per micro-batch, the head's waits and the worker's graph. Token digests
# must agree across runs. Run it as `bench/device-compare.sh prefill`; logs and traces in $OUT.
# ROUNDS (2), ROUNDS_IN_PROCESS (1; 0: none), QUICK=1: only one process and the split with the
# rows gathered on the worker and sent by the head.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?run through bench/device-compare.sh prefill}
build=$root/build-cuda
model=/tmp/m3-proxy.gguf
pids=()
cache=/tmp/prefill-worker-cache
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$cache"' EXIT

context=8192
n_predict=2
. "$root/bench/device-engine.sh"
prompt=$(sentences 330)
echo "== GPU tests"
gpu_tests
TANDEM_STEP_TRACE=$out/trace-worker.txt seeded_worker "$cache" --layers 0-29
traced() {  # run function, label, engine flags...
  local run=$1 label=$2 trace; shift 2
  trace="$out/trace-${label//[ ,()]/_}.txt"
  TANDEM_STEP_TRACE=$trace "$run" "$label" "$@"
  # The worker's file exists once its first graph ran.
  python3 "$root/bench/trace_summary.py" "$trace" $(ls "$out/trace-worker.txt" 2>/dev/null) 2>&1 | sed 's/^/    /'
}
echo "== tandem-engine one-shot, m3-proxy 60 layers, ~3960-token prompt, $n_predict tokens"
for round in $(seq "${ROUNDS:-2}"); do
  traced engine "one process (round $round)"
  traced split_30_30 "split (round $round)"
  traced split_30_30 "split, rows sent (round $round)" --no-worker-embedding
  [ -n "${QUICK:-}" ] && continue
  traced split_30_30 "split, no pipeline (round $round)" --no-pipeline
  traced split_30_30 "split, no overlap (round $round)" --no-overlap
  traced split_30_30 "split, no local slots (round $round)" --no-local-input-slots
done
for round in $(seq "${ROUNDS_IN_PROCESS:-1}"); do
  traced engine "split in-process (round $round)" --rpc 127.0.0.1:50072 --rpc-in-process 127.0.0.1:50072 --layer-split 30,30 --workers-first
  traced engine "split in-process, no overlap (round $round)" --rpc 127.0.0.1:50073 --rpc-in-process 127.0.0.1:50073 \
    --layer-split 30,30 --workers-first --no-overlap
done
