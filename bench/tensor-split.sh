#!/usr/bin/env bash
# The tensor splits against tandem's layer split over the same two workers, each ROUNDS times
# interleaved:
#   layer    tandem's layer split, half the layers on each worker
#   ffn      the FFN tensor split (`--split-mode ffn-tensor`, plan/ffn_split.h): every layer on both
#            workers, only the FFNs and the output head split, attention and KV cache whole on each
#   tensor   llama.cpp's meta device with its own rules (`--split-mode tensor`; not minimax-m3)
#   ffn-serial  the FFN split with its reductions one copy at a time (--no-overlapped-reduce)
# Models (`tandem synth`, Q8_0: a K-quant row of 256 cannot be halved in the tiny widths):
#   tiny     the tiny-qwen3moe preset (2 layers, hidden 256)
#   mid      qwen3moe, 8 layers, hidden 2048, 32 experts of 768 (8 used): 473 MB read per token
#   m3       minimax-m3 (sparse attention, its indexer), 8 layers, hidden 2048, 16 experts of 768
# Correctness: the first tokens' top-5 log-probabilities of one process, of each tensor split and of
# llama-server's own `-sm tensor` over the same workers, side by side (a different order of
# summation moves them a little; a wrong split moves them a lot), and the greedy tokens.
# DEVICE=cpu (default): two workers pinned to separate cores, WORKER_THREADS threads each (default
# 1), the head on the cores left (unpinned when none is). DEVICE=gpu: the two-box shape of a head
# with a GPU: the engine's own GPU and one worker's, both on the one GPU here (their speed cannot
# show: one GPU does both halves), CUDA graphs on, and a SOAK_TOKENS-token generation (default
# 20480) under the FFN split, its decode speed per 1024 tokens.
#
#   bench/tensor-split.sh BUILD_DIR [OUT_DIR]     (default OUT_DIR: bench/results/<date>-<host>-tensor-split)
# Environment: ROUNDS (default 3), TOKENS (generated per run, default 48), MODELS (default
# "tiny mid m3"), MODES (default "layer ffn ffn-serial tensor"; ffn-serial on mid only), DEVICE,
# WORKER_THREADS, SOAK_TOKENS (0: no soak).
set -euo pipefail
build=$(cd "${1:?usage: tensor-split.sh BUILD_DIR [OUT_DIR]}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$here/bench/results/$(date +%Y-%m-%d)-$(hostname)-tensor-split}
rounds=${ROUNDS:-3}
tokens=${TOKENS:-48}
models=${MODELS:-tiny mid m3}
modes=${MODES:-layer ffn ffn-serial tensor}
device=${DEVICE:-cpu}
soak=${SOAK_TOKENS:-20480}
[ "$device" = gpu ] || soak=0
llama_bin=$(dirname "$(sed -n 's/^#define TANDEM_LLAMA_SERVER_EXE "\(.*\)"/\1/p' "$build/generated/common/build_info.h")")
mkdir -p "$out"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cores=$(nproc)
# On the CPU each process gets one thread and the workers a core each; on the GPU the threads only
# feed it.
wthreads=${WORKER_THREADS:-1}
threads=$wthreads one=(--no-cpu-repack) head=()
[ "$device" = gpu ] && threads=4 one=()
if [ "$device" = cpu ] && [ "$cores" -gt $((2 * wthreads)) ]; then head=(taskset -c $((2 * wthreads))-$((cores - 1))); fi
"$build/tandem" secret new -o "$work/cluster.key" >/dev/null
rpc=()
nworkers=2
[ "$device" = gpu ] && nworkers=1
for i in $(seq 0 $((nworkers - 1))); do
  wp=$(free_port) fp=$(free_port)
  run=("$build/tandem" worker --listen 127.0.0.1:$wp --secret-file "$work/cluster.key" --name w$i --threads $threads)
  [ "$device" = cpu ] && run=(taskset -c $(((i * wthreads) % cores))-$(((i * wthreads + wthreads - 1) % cores)) "${run[@]}")
  "${run[@]}" >"$work/worker$i.log" 2>&1 &
  pids+=($!)
  sleep 1
  "$build/tandem" link forward --to 127.0.0.1:$wp --secret-file "$work/cluster.key" --listen 127.0.0.1:$fp \
    >"$work/forward$i.log" 2>&1 &
  pids+=($!)
  rpc+=(127.0.0.1:$fp)
done
sleep 1
rpcs=$(IFS=,; echo "${rpc[*]}")
for model in $models; do
  case $model in
    tiny) args=(--preset tiny-qwen3moe) ;;
    mid) args=(--preset tiny-qwen3moe --layers 8 --embd 2048 --heads 32 --kv-heads 4 --ff-exp 768 --experts 32 --experts-used 8) ;;
    m3) args=(--preset tiny --layers 8 --embd 2048 --heads 32 --kv-heads 4 --ff-exp 768 --experts 16 --experts-used 4) ;;
    *) echo "tensor-split: unknown model $model (tiny, mid, m3)" >&2; exit 2 ;;
  esac
  "$build/tandem" synth "${args[@]}" --type Q8_0 -o "$work/$model.gguf" >"$work/synth-$model.log" 2>&1
done
# llama.cpp's meta device refuses minimax-m3.
arch_of() { "$build/tandem" inspect --json "$work/$1.gguf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["arch"])'; }
prompt="the quick brown fox jumps over the lazy dog and keeps running"
runs="$work/runs.jsonl"
: > "$runs"
engine() {  # model mode engine-args...: one one-shot run, a JSON line
  local model=$1 mode=$2; shift 2
  local layers split
  layers=$("$build/tandem" inspect --json "$work/$model.gguf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_layer"])')
  case $mode in
    layer) split=(--layer-split $((layers / 2)),$((layers - layers / 2))) ;;
    tensor) split=(--layer-split 1,1 --split-mode tensor) ;;
    ffn) split=(--split-mode ffn-tensor) ;;
    ffn-serial) split=(--split-mode ffn-tensor --no-overlapped-reduce) ;;
  esac
  "${head[@]}" "$build/tandem" engine -m "$work/$model.gguf" -p "$prompt" --ignore-eos -t $threads "${one[@]}" \
    --rpc "$rpcs" "${split[@]}" --json "$@" 2>"$work/$model-$mode.err"
}
for model in $models; do
  for round in $(seq "$rounds"); do
    for mode in $modes; do
      [ "$mode" = tensor ] && [ "$(arch_of $model)" = minimax-m3 ] && continue
      [ "$mode" = ffn-serial ] && [ "$model" != mid ] && continue
      echo "tensor-split: $model round $round $mode" >&2
      engine $model $mode -n "$tokens" |
        python3 -c "import json,sys; j=json.load(sys.stdin); print(json.dumps({'model':'$model','mode':'$mode','round':$round,
  'tokens':j['tokens'],'decode_tps':j['decode_tps'],'prefill_tps':j['prefill_tps']}))" >> "$runs"
    done
  done
done
# The soak: one long generation under the FFN split with CUDA graphs on (the engine's default),
# its speed per 1024 tokens (a stall shows as a slow chunk).
if [ "$soak" -gt 0 ]; then
  echo "tensor-split: soak, $soak tokens" >&2
  soak_model=$(echo $models | awk '{print $NF}')
  engine $soak_model ffn -n "$soak" -c $((soak + 512)) --chunk-times 1024 > "$work/soak.json"
fi

cat > "$work/logprobs.py" <<'PY'
import json, socket, sys, time
path = sys.argv[1]
for _ in range(600):
    try:
        s = socket.socket(socket.AF_UNIX); s.connect(path); break
    except OSError:
        time.sleep(0.2)
f = s.makefile("rw")
while True:
    f.write('{"op":"status"}\n'); f.flush()
    e = json.loads(f.readline())
    if e.get("state") == "ready": break
    if e.get("state") == "failed": sys.exit(str(e))
    time.sleep(0.3)
body = {"prompt": sys.argv[2], "max_tokens": 3, "temperature": 0, "logprobs": 5, "ignore_eos": True}
f.write(json.dumps({"op": "submit", "id": "a", "kind": "completion", "body": body}) + "\n"); f.flush()
out = []
while True:
    e = json.loads(f.readline())
    out += [[[t["id"], t["logprob"]] for t in lp["top"]] for lp in e.get("logprobs", [])]
    if e.get("event") in ("done", "error"): break
print(json.dumps(out))
PY
logprobs() {  # name model engine-args...
  local name=$1 model=$2; shift 2
  rm -f "$work/engine.sock"
  "${head[@]}" "$build/tandem" engine -m "$work/$model.gguf" --socket "$work/engine.sock" -c 256 -t $threads "${one[@]}" "$@" \
    >"$work/engine-$name-$model.log" 2>&1 &
  local ep=$!
  timeout 300 python3 "$work/logprobs.py" "$work/engine.sock" "$prompt" > "$work/lp-$name-$model.json" || echo '[]' > "$work/lp-$name-$model.json"
  kill $ep; wait $ep 2>/dev/null || true
}
for model in $models; do
  [ "$model" = tiny ] && continue
  logprobs one $model
  logprobs ffn $model --rpc "$rpcs" --split-mode ffn-tensor
  [ "$(arch_of $model)" = minimax-m3 ] && continue
  logprobs tensor $model --rpc "$rpcs" --layer-split 1,1 --split-mode tensor
  port=$(free_port)
  "$llama_bin/llama-server" -m "$work/$model.gguf" --rpc "$rpcs" -ngl 99 -sm tensor -ts 1,1 -c 256 -np 1 --port $port \
    -t $threads --no-warmup --fit off -fa on >"$work/llama-server-$model.log" 2>&1 &
  sp=$!
  for _ in $(seq 300); do curl -sf 127.0.0.1:$port/health >/dev/null && break; sleep 0.5; done
  curl -s 127.0.0.1:$port/completion -d "{\"prompt\":\"$prompt\",\"n_predict\":3,\"temperature\":0,\"n_probs\":5,\"cache_prompt\":false}" |
    python3 -c "import json,sys; print(json.dumps([[[t['id'], t['logprob']] for t in p['top_logprobs']] for p in json.load(sys.stdin)['completion_probabilities']]))" \
    > "$work/lp-stock-tensor-$model.json" || echo '[]' > "$work/lp-stock-tensor-$model.json"
  kill $sp; wait $sp 2>/dev/null || true
done
cp "$work"/*.err "$work"/worker*.log "$out/" 2>/dev/null || true

python3 - "$runs" "$work" "$out" "$device" "$models" <<'PY'
import glob, json, os, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
work, out, device, models = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5].split()
def gap(a, b):
    """Largest difference of the log-probability of a token both top-5 lists hold, over the first tokens."""
    d = [abs(x[1] - y[1]) for ta, tb in zip(a, b) for x in ta for y in tb if x[0] == y[0]]
    return max(d) if d else None
lp = {}
for f in glob.glob(os.path.join(work, "lp-*.json")):
    lp[os.path.basename(f)[3:-5]] = json.load(open(f))
result = {"machine": os.uname().nodename, "cores": os.cpu_count(), "device": device, "models": {}, "logprobs": lp,
          "logprob_gap_vs_one_process": {}, "runs": runs}
for model in models:
    one = lp.get(f"one-{model}")
    if one:
        result["logprob_gap_vs_one_process"][model] = {
            k.rsplit("-", 1)[0]: gap(one, v) for k, v in lp.items() if k.endswith("-" + model) and not k.startswith("one-")}
    m = {}
    for mode in ("layer", "ffn", "ffn-serial", "tensor"):
        mine = [r for r in runs if r["model"] == model and r["mode"] == mode]
        if not mine:
            continue
        m[mode] = {"decode_tps": statistics.median(r["decode_tps"] for r in mine),
                   "prefill_tps": statistics.median(r["prefill_tps"] for r in mine),
                   "decode_samples": [r["decode_tps"] for r in mine]}
    layer_tokens = next((r["tokens"] for r in runs if r["model"] == model and r["mode"] == "layer"), None)
    for mode in ("ffn", "ffn-serial", "tensor"):
        if mode in m and "layer" in m:
            t = next(r["tokens"] for r in runs if r["model"] == model and r["mode"] == mode)
            m[mode]["same_tokens_as_layer_split"] = next((i for i, (x, y) in enumerate(zip(layer_tokens, t)) if x != y), len(t))
            m[mode]["decode_ratio"] = m[mode]["decode_tps"] / m["layer"]["decode_tps"]
            m[mode]["prefill_ratio"] = m[mode]["prefill_tps"] / m["layer"]["prefill_tps"]
    result["models"][model] = m
soak = os.path.join(work, "soak.json")
if os.path.exists(soak):
    j = json.load(open(soak))
    result["soak"] = {"tokens": len(j["tokens"]), "decode_tps": j["decode_tps"], "chunk_tps": j.get("chunk_tps", [])}
where = {"cpu": f"CPU, {os.cpu_count()} cores, two tandem workers pinned to separate cores, "
               f"{os.environ.get('WORKER_THREADS', '1')} thread(s) each",
         "gpu": "one GPU shared by two tandem workers (both halves on one GPU: speed cannot show)"}[device]
ref = "mid" if "mid" in result["models"] and "ffn" in result["models"]["mid"] else next(
    (k for k, v in result["models"].items() if "ffn" in v and "layer" in v), None)
if ref:
    result["tensor_parallel"] = {"decode_ratio_vs_layer_split": result["models"][ref]["ffn"]["decode_ratio"],
                                 "prefill_ratio_vs_layer_split": result["models"][ref]["ffn"]["prefill_ratio"],
                                 "model": ref, "split": "ffn-tensor",
                                 "where": where + f"; tandem engine --split-mode ffn-tensor; model '{ref}'"}
json.dump(result, open(os.path.join(out, "results.json"), "w"), indent=2)
for model, m in result["models"].items():
    line = [f"{model}: decode layer {m['layer']['decode_tps']:.1f} tok/s" if "layer" in m else model + ":"]
    for mode in ("ffn", "ffn-serial", "tensor"):
        if mode in m:
            line.append(f"{mode} {m[mode]['decode_tps']:.1f} ({m[mode].get('decode_ratio', 0):.2f}x, prefill "
                        f"{m[mode].get('prefill_ratio', 0):.2f}x, first {m[mode].get('same_tokens_as_layer_split')} tokens as the layer split's)")
    print("; ".join(line))
print("largest log-probability gap on the first tokens, against one process:", result["logprob_gap_vs_one_process"])
if "soak" in result:
    c = result["soak"]["chunk_tps"]
    print(f"soak: {result['soak']['tokens']} tokens at {result['soak']['decode_tps']:.1f} tok/s; per 1024 tokens "
          f"min {min(c) if c else 0:.1f}, max {max(c) if c else 0:.1f}")
PY
echo "tensor-split: $out/results.json" >&2
