#!/usr/bin/env bash
# Speculative decoding side by side (issue 41), from one build, one model and one draft model, in
# one run on one machine (SPLIT_MODE=gpu: both halves of a split on CUDA0, as on the lent GPU):
#   tandem-split        tandem serve + tandem worker, layers halved
#   stock-split-graphs  llama-server --rpc -> ggml-rpc-server, the same split, CUDA graphs on; the
#                       draft on the head's own device (-devd CUDA0; on a CPU head: none, the CPU)
#   single              llama-server, one process
#   tandem-single       tandem serve, every layer in one process
# each without speculation ("off") and with the draft model at each synthetic acceptance length of
# LENGTHS (--spec-synth-len, llama-server's and tandem serve's: every drafted token is accepted at
# random, at rates that make a step give L tokens on average, whatever the draft proposes), one
# launch each: a warm-up request, then decode tok/s at concurrency 1 by `tandem bench`. Then the
# verify cost of tandem-split and tandem-single: one launch each with --draft-max VERIFY_MAX and
# every drafted token accepted, and requests with "speculative.n_max": k for k = 0..VERIFY_MAX, so
# that a step carries k+1 tokens (bench/spec_client.py verify). Order: "off" and the first length
# for every configuration, the verify runs, then the other lengths; with DEADLINE_S, what would end
# past it is skipped. results.json and results.md (bench/spec_report.py) are written after every
# measurement, so a run cut short keeps what it measured.
#
#   bench/speculation.sh BUILD_DIR MODEL.gguf DRAFT.gguf
# Writes bench/results/<date>-<machine>-speculation/{results.json,results.md} and each launch's logs.
# Environment: DRAFT_MAX (tokens drafted per step, default 4: the published EAGLE3 acceptance of
# 2.7-3.5 tokens per step needs at least 3; at 4, a length of 3.0 is a per-token acceptance of
# 0.74, a good draft's, while each drafted token beyond what is accepted widens the union of experts
# a 128-expert verify step reads for nothing), LENGTHS (default "3.0 2.0 1.5", each at most
# DRAFT_MAX+1), CONFIGS (default the four above), VERIFY (configurations of the verify runs, default
# "tandem-split tandem-single"; "" none), VERIFY_MAX (8), GEN_TOKENS (tokens per decode request,
# 256), VERIFY_TOKENS (per verify request, 128; 2 requests per k), PROMPT_TOKENS (64), DEADLINE_S
# (seconds from the start: a step that would end past it is skipped), RESULTS_COPY (a folder that
# gets results.json and results.md after every measurement too), COMMIT, MACHINE, BENCH_ARGS (extra
# `tandem bench` flags); bench/servers.sh's CONTEXT (default here 4096), PARALLEL (here 1),
# SPLIT_MODE, SPLIT_THREADS, TANDEM_SERVE_ARGS.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/bench/servers.sh"
CONTEXT=${CONTEXT:-4096} PARALLEL=${PARALLEL:-1}
servers_init "${1:?usage: speculation.sh BUILD_DIR MODEL.gguf DRAFT.gguf}" "${2:?model}"
draft=$(readlink -f "${3:?draft model}")
draft_max=${DRAFT_MAX:-4}
lengths=(${LENGTHS:-3.0 2.0 1.5})
configs=(${CONFIGS:-tandem-split stock-split-graphs single tandem-single})
verify_configs=(${VERIFY-tandem-split tandem-single})
verify_max=${VERIFY_MAX:-8}
gen=${GEN_TOKENS:-256}
prompt=${PROMPT_TOKENS:-64}
machine=${MACHINE:-$(hostname)}
commit=${COMMIT:-$(git -C "$here" describe --always --abbrev=40 --dirty 2>/dev/null || echo unknown)}
out="$here/bench/results/$(date +%Y-%m-%d)-$machine-speculation"
client=(python3 "$here/bench/spec_client.py")
runs="$work/runs.jsonl"
mkdir -p "$out"
: > "$runs"
"$tandem" inspect --json "$model" > "$work/model.json"
say() { echo "speculation: [${SECONDS}s] $*" >&2; }

# The flags of one launch: speculation off, or the draft at synthetic acceptance length $1 with
# drafts of $2 tokens at most.
spec_flags() {
  llama_args=() llama_split_args=() tandem_args=()
  [ "$1" = off ] && return 0
  llama_args=(-md "$draft" --spec-type draft-simple --spec-draft-n-max "$2" --spec-synth-len "$1")
  tandem_args=(--speculative draft --draft-model "$draft" --draft-max "$2" --spec-synth-len "$1")
  if [ "${SPLIT_MODE:-cpu}" = gpu ]; then
    llama_args+=(-ngld 99) llama_split_args=(-devd CUDA0)
  else
    llama_split_args=(-devd none)  # the draft stays on the head's CPU, not on the RPC server
  fi
}

# Appends one line to runs.jsonl: the JSON object $1 with, for each further NAME FILE pair, the
# JSON in FILE under NAME; then writes the results (and their copy).
record() {
  python3 -c 'import json, sys
r = json.loads(sys.argv[1])
for k, f in zip(sys.argv[2::2], sys.argv[3::2]):
    r[k] = json.load(open(f))
print(json.dumps(r))' "$@" >> "$runs"
  DRAFT_NAME=$(basename "$draft") python3 "$here/bench/spec_report.py" "$runs" "$work/model.json" "$out" "$commit" "$machine" >/dev/null
  if [ -n "${RESULTS_COPY:-}" ]; then mkdir -p "$RESULTS_COPY" && cp "$out"/results.{json,md} "$RESULTS_COPY/"; fi
}

# Whether a step of about $1 seconds ends before DEADLINE_S.
fits() { [ -z "${DEADLINE_S:-}" ] || [ $((SECONDS + $1)) -le "$DEADLINE_S" ]; }

# Starts configuration $1 with the flags spec_flags set, for the step named $2; false (and a line
# in runs.jsonl) when it does not come up.
launch() {
  load_s=""
  start_config "$1" || true
  if [ -z "$load_s" ]; then
    record "{\"config\":\"$1\",\"length\":\"$2\",\"error\":\"did not start (logs: $out)\"}"
    keep_logs "$1" "$2"
    stop_all
    return 1
  fi
}

keep_logs() { for f in "$work/$1"*.log; do cp "$f" "$out/$(basename "$f" .log)-$2.log"; done; }

decode_step() {  # config length
  local c=$1 length=$2 head
  fits "$([[ $c == stock-* ]] && echo 60 || echo 20)" || { say "$c $length: skipped (deadline)"; record "{\"config\":\"$c\",\"length\":\"$length\",\"skipped\":\"deadline\"}"; return 0; }
  say "$c, speculation $length"
  spec_flags "$length" "$draft_max"
  launch "$c" "$length" || return 0
  head="{\"config\":\"$c\",\"length\":\"$length\",\"draft_max\":$draft_max,\"load_s\":$load_s,\"link_bytes\":${link_bytes:-0}}"
  if "${client[@]}" warmup "$url" --key "$key" --prompt-tokens "$prompt" > "$work/warm.json" &&
     "$tandem" bench --json --url "$url" --key "$key" --model bench --runs 1 --gen-tokens "$gen" \
       --ttft-tokens "$prompt" --prefill-tokens "$prompt" --concurrency 1 ${BENCH_ARGS:-} > "$work/bench.json" &&
     "${client[@]}" health "$url" --key "$key" --once > "$work/after.json"; then
    record "$head" warmup "$work/warm.json" bench "$work/bench.json" after "$work/after.json"
    say "$c $length: $("${client[@]}" summary "$work/bench.json" "$work/warm.json")"
    if [ "$length" != off ] && [[ $c != tandem-* ]] && ! grep -q '"draft_n": [1-9]' "$work/warm.json"; then
      say "WARNING: $c drafted nothing with speculation $length (its log: $out/$c-$length.log)"
    fi
  else
    record "{\"config\":\"$c\",\"length\":\"$length\",\"error\":\"a request failed (logs: $out)\"}"
  fi
  keep_logs "$c" "$length"
  stop_all
}

verify_step() {  # config
  local c=$1
  fits 45 || { say "verify $c: skipped (deadline)"; record "{\"config\":\"$c\",\"kind\":\"verify\",\"skipped\":\"deadline\"}"; return 0; }
  say "$c, verify cost: --draft-max $verify_max, every draft accepted, requests with speculative.n_max 0..$verify_max"
  llama_args=() llama_split_args=()
  tandem_args=(--speculative draft --draft-model "$draft" --draft-max "$verify_max" --spec-synth-len "$((verify_max + 1))")
  launch "$c" verify || return 0
  if "${client[@]}" warmup "$url" --key "$key" --prompt-tokens "$prompt" > "$work/warm.json" &&
     "${client[@]}" verify "$url" --key "$key" --k "$(seq -s, 0 "$verify_max")" --tokens "${VERIFY_TOKENS:-128}" \
       --prompt-tokens "$prompt" > "$work/verify.json"; then
    record "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({"config": sys.argv[2], "kind": "verify", "draft_max": int(sys.argv[3]), "load_s": float(sys.argv[4]), "points": r["points"]}))' \
      "$work/verify.json" "$c" "$verify_max" "$load_s")"
  else
    record "{\"config\":\"$c\",\"kind\":\"verify\",\"error\":\"a request failed (logs: $out)\"}"
  fi
  keep_logs "$c" verify
  stop_all
}

say "model $(basename "$model") ($n_layer layers, the worker's $worker_layers), draft $(basename "$draft"), draft_max $draft_max, lengths ${lengths[*]}; results in $out"
if [[ " ${configs[*]} ${verify_configs[*]} " == *" tandem-split "* ]]; then
  say "seeding tandem-split's worker cache"
  seed_worker
fi
for length in off "${lengths[0]}"; do
  for c in "${configs[@]}"; do decode_step "$c" "$length"; done
done
for c in "${verify_configs[@]}"; do verify_step "$c"; done
for length in "${lengths[@]:1}"; do
  for c in "${configs[@]}"; do decode_step "$c" "$length"; done
done
say "done"
cat "$out/results.md"
