#!/usr/bin/env bash
# Step 2 of the tensor split, driving llama.cpp's meta device (`tandem engine --split-mode tensor`)
# on the CPU: two tandem workers pinned to separate cores behind forwarders, a tiny and a mid-size
# qwen3moe (Q8_0: the meta device splits rows inside quantisation blocks, so K-quants of 256 need
# wider matrices than the tiny models'), each ROUNDS times interleaved:
#   layer    tandem's layer split of the same two workers, half the layers each
#   tensor   every layer on both workers at once, partial sums reduced through the head
# Correctness: the first tokens' top-5 log-probabilities of one process, of llama-server's own
# `-sm tensor` over the same workers, and of the tensor split, side by side (a different order of
# summation moves them a little; a wrong split moves them a lot).
#
#   bench/tensor-split-cpu.sh BUILD_DIR [OUT_DIR]     (default OUT_DIR: bench/results/<date>-<host>-tensor-split)
# Environment: ROUNDS (default 3), TOKENS (generated per run, default 48).
set -euo pipefail
build=$(cd "${1:?usage: tensor-split-cpu.sh BUILD_DIR [OUT_DIR]}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$here/bench/results/$(date +%Y-%m-%d)-$(hostname)-tensor-split}
rounds=${ROUNDS:-3}
tokens=${TOKENS:-48}
llama_bin=$(dirname "$(sed -n 's/^#define TANDEM_LLAMA_SERVER_EXE "\(.*\)"/\1/p' "$build/generated/common/build_info.h")")
mkdir -p "$out"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cores=$(nproc)
"$build/tandem" secret new -o "$work/cluster.key" >/dev/null
rpc=()
for i in 0 1; do
  wp=$(free_port) fp=$(free_port)
  taskset -c $((i % cores)) "$build/tandem" worker --listen 127.0.0.1:$wp --secret-file "$work/cluster.key" --name w$i \
    --threads 1 >"$work/worker$i.log" 2>&1 &
  pids+=($!)
  sleep 1
  "$build/tandem" link forward --to 127.0.0.1:$wp --secret-file "$work/cluster.key" --listen 127.0.0.1:$fp \
    >"$work/forward$i.log" 2>&1 &
  pids+=($!)
  rpc+=(127.0.0.1:$fp)
done
sleep 1
rpcs="${rpc[0]},${rpc[1]}"
"$build/tandem" synth --preset tiny-qwen3moe --type Q8_0 -o "$work/tiny.gguf" >/dev/null 2>&1
"$build/tandem" synth --preset tiny-qwen3moe --type Q8_0 --layers 8 --embd 2048 --heads 32 --kv-heads 4 --ff-exp 768 \
  --experts 32 --experts-used 8 -o "$work/mid.gguf" >/dev/null 2>&1
prompt="the quick brown fox jumps over the lazy dog and keeps running"
runs="$work/runs.jsonl"
: > "$runs"
for model in tiny mid; do
  layers=$("$build/tandem" inspect --json "$work/$model.gguf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_layer"])')
  for round in $(seq "$rounds"); do
    for mode in layer tensor; do
      split=(--layer-split $((layers / 2)),$((layers - layers / 2)))
      [ "$mode" = tensor ] && split=(--layer-split 1,1 --split-mode tensor)
      echo "tensor-split: $model round $round $mode" >&2
      "$build/tandem" engine -m "$work/$model.gguf" -p "$prompt" -n "$tokens" --ignore-eos -t 1 --no-cpu-repack \
        --rpc "$rpcs" "${split[@]}" --json 2>"$work/$model-$mode.err" |
        python3 -c "import json,sys; j=json.load(sys.stdin); print(json.dumps({'model':'$model','mode':'$mode','round':$round,
  'tokens':j['tokens'],'decode_tps':j['decode_tps'],'prefill_tps':j['prefill_tps']}))" >> "$runs"
    done
  done
done

# The first tokens' distributions: one process (tandem engine), llama-server -sm tensor over the
# same workers, and the tensor split.
cat > "$work/logprobs.py" <<'EOF'
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
EOF
logprobs() {  # name model engine-args...
  local name=$1 model=$2; shift 2
  rm -f "$work/engine.sock"
  "$build/tandem" engine -m "$work/$model.gguf" --socket "$work/engine.sock" -c 256 -t 1 --no-cpu-repack "$@" \
    >"$work/engine-$name.log" 2>&1 &
  local ep=$!
  timeout 300 python3 "$work/logprobs.py" "$work/engine.sock" "$prompt" > "$work/lp-$name.json"
  kill $ep; wait $ep 2>/dev/null || true
}
logprobs one mid
logprobs tensor mid --rpc "$rpcs" --layer-split 1,1 --split-mode tensor
port=$(free_port)
"$llama_bin/llama-server" -m "$work/mid.gguf" --rpc "$rpcs" -ngl 99 -sm tensor -ts 1,1 -c 256 -np 1 --port $port -t 1 \
  --no-warmup --fit off -fa on >"$work/llama-server.log" 2>&1 &
sp=$!
for _ in $(seq 300); do curl -sf 127.0.0.1:$port/health >/dev/null && break; sleep 0.5; done
curl -s 127.0.0.1:$port/completion -d "{\"prompt\":\"$prompt\",\"n_predict\":3,\"temperature\":0,\"n_probs\":5,\"cache_prompt\":false}" |
  python3 -c "import json,sys; print(json.dumps([[[t['id'], t['logprob']] for t in p['top_logprobs']] for p in json.load(sys.stdin)['completion_probabilities']]))" \
  > "$work/lp-stock-tensor.json"
kill $sp; wait $sp 2>/dev/null || true

python3 - "$runs" "$work" "$out" <<'EOF'
import json, os, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
work, out = sys.argv[2], sys.argv[3]
lp = {n: json.load(open(os.path.join(work, f"lp-{n}.json"))) for n in ("one", "stock-tensor", "tensor")}
def gap(a, b):
    """Largest difference of the log-probability of a token both top-5 lists hold, over the first tokens."""
    d = [abs(x[1] - y[1]) for ta, tb in zip(a, b) for x in ta for y in tb if x[0] == y[0]]
    return max(d) if d else None
result = {"machine": os.uname().nodename, "cores": os.cpu_count(), "models": {}, "logprobs": lp,
          "logprob_gap_vs_one_process": {"tensor": gap(lp["one"], lp["tensor"]), "stock_tensor": gap(lp["one"], lp["stock-tensor"]),
                                         "tensor_vs_stock_tensor": gap(lp["tensor"], lp["stock-tensor"])},
          "runs": runs}
for model in ("tiny", "mid"):
    m = {}
    for mode in ("layer", "tensor"):
        mine = [r for r in runs if r["model"] == model and r["mode"] == mode]
        m[mode] = {"decode_tps": statistics.median(r["decode_tps"] for r in mine),
                   "prefill_tps": statistics.median(r["prefill_tps"] for r in mine)}
    a, b = [r["tokens"] for r in runs if r["model"] == model and r["mode"] == "layer"][0], \
           [r["tokens"] for r in runs if r["model"] == model and r["mode"] == "tensor"][0]
    m["same_tokens_as_layer_split"] = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
    m["decode_ratio"] = m["tensor"]["decode_tps"] / m["layer"]["decode_tps"]
    m["prefill_ratio"] = m["tensor"]["prefill_tps"] / m["layer"]["prefill_tps"]
    result["models"][model] = m
result["tensor_parallel"] = {"decode_ratio_vs_layer_split": result["models"]["mid"]["decode_ratio"],
                             "where": f"CPU, {os.cpu_count()} cores, two tandem workers pinned to separate cores; "
                                      "llama.cpp's meta device driven by tandem engine --split-mode tensor; mid-size qwen3moe"}
json.dump(result, open(os.path.join(out, "results.json"), "w"), indent=2)
for model, m in result["models"].items():
    print(f"{model}: decode layer {m['layer']['decode_tps']:.1f}, tensor {m['tensor']['decode_tps']:.1f} tok/s "
          f"({m['decode_ratio']:.2f}x); prefill {m['layer']['prefill_tps']:.1f} / {m['tensor']['prefill_tps']:.1f} "
          f"({m['prefill_ratio']:.2f}x); the first {m['same_tokens_as_layer_split']} tokens as the layer split's")
print("largest log-probability gap on the first tokens, against one process:", result["logprob_gap_vs_one_process"])
EOF
echo "tensor-split: $out/results.json" >&2
