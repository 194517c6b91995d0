#!/usr/bin/env bash
# The prompt cache's correctness on a build's devices (the GPU's in `device-compare.sh check`):
# tandem serve split through a tandem worker, one slot, for each tiny model: conversation a, a
# again (its slot's own prefix, the last prompt token evaluated alone), b, then a once more, which
# restores a's state from the cache, each node's part from its own memory. The restored turn must
# give the reused turn's text (a token evaluated alone sums differently from one inside a batch,
# so that is the text to compare with), its usage must count the prefix as cached, and /health
# must show the restore with the worker holding its part. One line per model; exit 1 on a mismatch.
#
#   bench/prompt-cache-check.sh OUT_DIR      (BUILD: the build folder, default build-cuda;
#                                              PRESETS: default tiny tiny-qwen3moe tiny-glm4moe;
#                                              KV_TYPE: serve's --kv-type, default f16)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: prompt-cache-check.sh OUT_DIR}
build=${BUILD:-$root/build-cuda}
mkdir -p "$out"
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; pids=(); }
trap stop EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
rm -f "$out/pc-cluster.key" "$out/pc-keys.db"
"$build/tandem" secret new -o "$out/pc-cluster.key" >/dev/null
key=$("$build/tandem" keys --db "$out/pc-keys.db" create --name check 2>/dev/null)
status=0
for preset in ${PRESETS:-tiny tiny-qwen3moe tiny-glm4moe}; do
  model=/tmp/tandem-pc-$preset.gguf
  "$build/tandem" synth --preset "$preset" -o "$model" >/dev/null || exit 1
  layers=$("$build/tandem" inspect --json "$model" | python3 -c 'import json,sys; print(json.load(sys.stdin)["n_layer"])')
  wport=$(free_port) port=$(free_port)
  "$build/tandem" worker --listen 127.0.0.1:$wport --secret-file "$out/pc-cluster.key" --name w \
    >"$out/pc-$preset-worker.log" 2>&1 & pids+=($!)
  "$build/tandem" serve -m "$model" --worker w=127.0.0.1:$wport --secret-file "$out/pc-cluster.key" \
    --keys-db "$out/pc-keys.db" --listen 127.0.0.1:$port --parallel 1 --context 4096 --prompt-cache 1GiB \
    --layers $((layers / 2)),$((layers - layers / 2)) --kv-type "${KV_TYPE:-f16}" --model-id check \
    >"$out/pc-$preset-serve${KV_TYPE:+-$KV_TYPE}.log" 2>&1 & pids+=($!)
  python3 - "$port" "$key" "$preset" <<'EOF' || status=1
import json, sys, time, urllib.request
port, key, preset = sys.argv[1:4]
url = f"http://127.0.0.1:{port}"
def call(path, body=None):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)
for _ in range(600):
    try:
        if call("/health").get("state") == "ready":
            break
    except OSError:
        pass
    time.sleep(0.2)
else:
    sys.exit(f"{preset}: serve did not get ready")
a = "Alice asks:" + " the quick brown fox jumps over the lazy dog" * 60
b = "Bob says:" + " a lazy dog sleeps all day in the sun" * 60
post = lambda p: call("/v1/completions", {"prompt": p, "max_tokens": 24, "temperature": 0, "ignore_eos": True})
first, reused, _, restored = post(a), post(a), post(b), post(a)
n = first["usage"]["prompt_tokens"]
for _ in range(50):
    pc = call("/health").get("prompt_cache", {})
    if pc.get("hits", 0) >= 1:
        break
    time.sleep(0.2)
problems = []
if restored["choices"][0]["text"] != reused["choices"][0]["text"]:
    problems.append(f"restored text {restored['choices'][0]['text']!r} != reused {reused['choices'][0]['text']!r}")
if restored["usage"]["prompt_tokens_details"]["cached_tokens"] != n - 1:
    problems.append(f"cached tokens {restored['usage']['prompt_tokens_details']['cached_tokens']} of {n}")
if pc.get("hits") != 1 or pc.get("failed_restores") != 0 or not pc.get("bytes", {}).get("w"):
    problems.append(f"/health prompt_cache {pc}")
same_as_fresh = restored["choices"][0]["text"] == first["choices"][0]["text"]
print(f"{preset}: {n}-token prompt restored from the cache, the worker holding "
      f"{pc.get('bytes', {}).get('w', 0)} B of it: " + ("; ".join(problems) if problems else
      "same text as the slot's own prefix" + (", and as the fresh prefill" if same_as_fresh else
                                             " (the fresh prefill's differs: a batch's sums)")))
sys.exit(1 if problems else 0)
EOF
  stop
done
exit $status
