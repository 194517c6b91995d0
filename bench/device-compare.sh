#!/usr/bin/env bash
# The GPU comparison on the lent H200 machine, in steps that each fit one device call:
#   bench/device-compare.sh build     CUDA build for sm_90 (scripts/device-build.sh), with the GPU tests
#                                     targets (datapath_test, worker_load_test's seeded loads), ~5 min
#   bench/device-compare.sh model     writes the m3-proxy model to /tmp (tandem synth), ~75 s
#                                     (PRESET=qwen3-proxy or glm-proxy: another architecture, for model and compare)
#   bench/device-compare.sh compare [ROUNDS]   bench/compare.sh with SPLIT_MODE=gpu
#   bench/device-compare.sh diag [LAYERS]      bench/device-diag.sh: where a split loses decode, ~3 min
#   bench/device-compare.sh load               load times only: single and a seeded tandem-split
#   bench/device-compare.sh writes             bench/device-writes.sh: what per-step input writes cost, ~4 min
#   bench/device-compare.sh placement          bench/device-placement.sh: the split's cost against the worker's layers, ~3 min
#   bench/device-compare.sh reuse              bench/device-reuse.sh: what sending repeated inputs once saves a prompt, ~4 min
#   bench/device-compare.sh contexts           bench/device-contexts.sh: the split's cost with one CUDA context or two, ~3 min
#   bench/device-compare.sh local              bench/device-local.sh: the head's queued GPU input copies and the input slots, ~4.5 min
#   bench/device-compare.sh prefill            bench/device-prefill.sh: a long prompt's split, pipelined or not, one context or two, ~3 min
#   bench/device-compare.sh check [FLAG]       bench/device-check.sh: GPU tests and the tiny model's tokens, one process and split, ~1 min
#   bench/device-compare.sh prompt-cache [ROUNDS]  three 8k-token conversations taking turns on one slot, tandem-split
#                                     against llama-server --cache-ram over the stock split (graphs on), ~6 min a round
#   bench/device-compare.sh speculation       bench/speculation.sh: speculative decoding side by side on m3-experts-proxy
#                                     (MiniMax-M3's layers with all 128 experts, ~25 GB) with a small draft of its
#                                     vocabulary, both written to /tmp first if missing (~1 min): tandem-split, the
#                                     stock split with graphs, single and tandem-single, without speculation and at
#                                     synthetic acceptance lengths 3.0, 2.0, 1.5, then the verify cost curve; ~7 min
#                                     with the files there, whatever is left past 9 minutes is skipped
#   bench/device-compare.sh tensor-split      bench/tensor-split.sh on the GPU: the FFN tensor split's tokens against one
#                                     process, beside the layer split and llama.cpp's, and a 20k-token soak, ~5 min
#   bench/device-compare.sh tensor-split-cpu  the same on this machine's CPU cores (CUDA hidden), workers of 4
#                                     threads on cores of their own and the head on the rest, ~4 min
# Results and logs go to $OUT (the device tool's output folder: for the diagnostic modes, the
# printed summary and MODE-logs.tar.gz) as well as bench/results/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/device-out}
mkdir -p "$out"
sysroot=/tmp/tandem-dev/sysroot
export LD_LIBRARY_PATH=$sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TANDEM_CACHE=/tmp/tandem-cache
# PRESET picks the model (a `tandem synth` preset: m3-proxy, qwen3-proxy, glm-proxy); the disk holds
# about two of them beside the worker caches, so delete the last one's file before the next.
preset=${PRESET:-m3-proxy}
model=/tmp/$preset.gguf
export OUT=$out
case "${1:?usage: device-compare.sh build|model|compare [ROUNDS]|prompt-cache [ROUNDS]|speculation|tensor-split|tensor-split-cpu|diag [LAYERS]|load|writes|placement|reuse|contexts|local|prefill|check [FLAG]}" in
  build)
    "$root/scripts/device-build.sh" tandem tandem-engine datapath_test worker_load_test 2>&1 | tail -5
    ls "$TANDEM_CACHE"/build/*/bin/ | grep -E 'llama-server|ggml-rpc-server' ;;
  model)
    [ -f "$model" ] || "$root/build-cuda/tandem" synth --preset "$preset" -o "$model"
    "$root/build-cuda/tandem" inspect "$model" | head -20 ;;
  compare)
    nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv > "$out/gpu.txt"
    lscpu | grep -E 'Model name|^CPU\(s\)' >> "$out/gpu.txt"
    MACHINE=${MACHINE:-h200} SPLIT_MODE=gpu "$root/bench/compare.sh" "$root/build-cuda" "$model" "${2:-1}"
    # This run's folder only, without the logs: the device tool brings back a limited number of files.
    run_dir="$root/bench/results/$(date +%Y-%m-%d)-${MACHINE:-h200}"
    mkdir -p "$out/results" && cp "$run_dir"/results.{json,md,svg} "$out/results/" ;;
  prompt-cache)
    # Per slot: the 8k prompt, 3 returning turns and 3 continuing ones of 200 tokens, and the reply.
    CACHE_RAM_MIB=8192 PARALLEL=1 CONTEXT=10240 SKIP_COLD=1 CONFIGS="stock-split-cache tandem-split" \
      BENCH_ARGS="--conversations 3 --conversation-tokens 8192 --turn-tokens 200 --turns 3 --only-conversations" \
      MACHINE=${MACHINE:-h200}-prompt-cache SPLIT_MODE=gpu "$root/bench/compare.sh" "$root/build-cuda" "$model" "${2:-1}"
    run_dir="$root/bench/results/$(date +%Y-%m-%d)-${MACHINE:-h200}-prompt-cache"
    mkdir -p "$out/results" && cp "$run_dir"/results.{json,md} "$out/results/" ;;
  speculation)
    # Its own model (PRESET overrides): the union of experts a verify step reads needs all 128.
    model=/tmp/${PRESET:-m3-experts-proxy}.gguf draft=/tmp/${PRESET:-m3-experts-proxy}-draft.gguf
    nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv > "$out/gpu.txt"
    card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | awk '{print tolower($2)}')
    # The model, its worker's cache (half of it) and the draft beside the build: drop the other
    # presets' files first when the disk is short (docs/benchmark.md: about two models fit).
    need_gb=$(( $([ -f "$model" ] && echo 0 || echo 26) + 14 ))
    if [ "$(df -BG --output=avail /tmp | tail -1 | tr -dc 0-9)" -lt "$need_gb" ]; then
      for f in /tmp/*-proxy.gguf; do [ "$f" = "$model" ] || { echo "removing $f: the disk is short" >&2; rm -f "$f"; }; done
    fi
    [ -f "$model" ] || "$root/build-cuda/tandem" synth --preset "${PRESET:-m3-experts-proxy}" -o "$model" 2>&1 | tail -2
    [ -f "$draft" ] || "$root/build-cuda/tandem" synth --draft-for "$model" -o "$draft" 2>&1 | tail -1
    # One device call: what would end past SPEC_DEADLINE_S (default 540 s from this script's start)
    # is skipped, and the results are copied to $OUT after every measurement.
    status=0
    MACHINE=${MACHINE:-${card:-gpu}} SPLIT_MODE=${SPLIT_MODE:-gpu} DEADLINE_S=$(( ${SPEC_DEADLINE_S:-540} - SECONDS )) \
      RESULTS_COPY="$out/results" "$root/bench/speculation.sh" "$root/build-cuda" "$model" "$draft" 2>&1 |
      grep --line-buffered -v ' progress: ' | tee "$out/speculation.txt" || status=$?
    run_dir="$root/bench/results/$(date +%Y-%m-%d)-${MACHINE:-${card:-gpu}}-speculation"
    if [ -f "$run_dir/results.json" ]; then
      python3 "$root/bench/spec_model.py" "$run_dir/results.json" --json "$out/results/spec_model.json" > "$out/spec_model.txt" 2>&1 || true
      tar czf "$out/speculation-logs.tar.gz" -C "$run_dir" --exclude='results.*' .
    fi
    exit "$status" ;;
  tensor-split)
    DEVICE=gpu ROUNDS=${ROUNDS:-2} TOKENS=${TOKENS:-128} MODELS=${MODELS:-mid m3} \
      "$root/bench/tensor-split.sh" "$root/build-cuda" "$out/tensor-split-gpu" 2>&1 | tail -12 ;;
  tensor-split-cpu)
    CUDA_VISIBLE_DEVICES= DEVICE=cpu WORKER_THREADS=4 ROUNDS=${ROUNDS:-3} MODELS=${MODELS:-mid m3} SOAK_TOKENS=0 \
      "$root/bench/tensor-split.sh" "$root/build-cuda" "$out/tensor-split-cpu" 2>&1 | tail -8 ;;
  load)
    SKIP_COLD=1 LOAD_ONLY=1 CONFIGS="single tandem-split tandem-split" SPLIT_MODE=gpu \
      "$root/bench/compare.sh" "$root/build-cuda" "$model" 1 2>&1 | tee "$out/load.txt" ;;
  diag|writes|placement|reuse|contexts|local|prefill|check)
    # The device tool brings back at most 8 files: the scripts' logs, traces and JSON go into one
    # archive beside the printed summary.
    # The logs come back also when the script fails: that is when they are needed.
    work=$(mktemp -d) status=0
    OUT=$work "$root/bench/device-$1.sh" ${2:+"$2"} 2>&1 | tee "$out/$1.txt" || status=$?
    find "$work" -type f \( -name '*.log' -o -name '*.txt' -o -name '*.json' \) -printf '%P\n' |
      tar czf "$out/$1-logs.tar.gz" -C "$work" -T -
    rm -rf "$work"
    exit "$status" ;;
esac
