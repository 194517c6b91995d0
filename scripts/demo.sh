#!/usr/bin/env bash
# `make demo`: the main job on a small built-in model. Writes the tiny synthetic model, starts two
# local workers and `tandem serve` split across them, shows the load, creates an API key, sends a
# chat request, prints the answer and the speed, and shuts everything down.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
tandem="$build/tandem"
out=${TANDEM_DEMO_OUT:-$build/demo}
rm -rf "$out"
mkdir -p "$out"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=${TANDEM_DEMO_PORT:-$(free_port)}
wport=($(free_port) $(free_port))
pids=()
cleanup() {  # the gateway first (it drains), then the workers
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null || true; wait "${pids[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
wait_http() {  # url, seconds
  for _ in $(seq $(( $2 * 10 ))); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done
  return 1
}

step "tandem version"
"$tandem" version

step "write the tiny synthetic MiniMax-M3-shaped model"
"$tandem" synth --preset tiny -o "$out/tiny.gguf"

step "a cluster secret and an API key"
"$tandem" secret new -o "$out/cluster.key"
key=$("$tandem" keys --db "$out/keys.db" create --name demo 2>/dev/null)
echo "key: ${key:0:13}… (shown once; stored hashed in $out/keys.db)"

step "two workers on loopback (each would run on its own box)"
for i in 1 2; do
  "$tandem" worker --listen 127.0.0.1:${wport[$((i - 1))]} --secret-file "$out/cluster.key" --name box-$i --threads 1 \
    >"$out/worker-$i.log" 2>&1 &
  pids+=($!)
done
sleep 0.5
grep -h "listening" "$out"/worker-*.log || true

step "tandem serve, the tiny model split over the head and both workers"
"$tandem" serve -m "$out/tiny.gguf" --worker box-1=127.0.0.1:${wport[0]} --worker box-2=127.0.0.1:${wport[1]} \
  --secret-file "$out/cluster.key" --keys-db "$out/keys.db" --listen 127.0.0.1:$port \
  --context 1024 --parallel 2 --layers 2,1,1 --model-id tiny > >(tee "$out/serve.log") 2>&1 &
pids+=($!)
for _ in $(seq 600); do
  state=$( (curl -s "http://127.0.0.1:$port/health" || true) | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p' | tail -1)
  [ "$state" = ready ] && break
  kill -0 "${pids[-1]}" 2>/dev/null || break  # serve exited: its error is above
  sleep 0.1
done
[ "$state" = ready ] || { echo "demo: the cluster did not become ready (state: ${state:-none})" >&2; exit 1; }

step "a chat request through the split (random weights: the text is noise, the path and speed are real)"
start=$(date +%s.%N)
reply=$(curl -s "http://127.0.0.1:$port/v1/chat/completions" -H "Authorization: Bearer $key" \
  -H 'Content-Type: application/json' \
  -d '{"model":"tiny","messages":[{"role":"user","content":"What do two desktop boxes joined by one cable do?"}],"max_tokens":64,"temperature":0}')
end=$(date +%s.%N)
python3 - "$reply" "$start" "$end" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
if "error" in r:
    sys.exit("demo: the request failed: " + r["error"]["message"])
u = r["usage"]
secs = float(sys.argv[3]) - float(sys.argv[2])
print("answer:", r["choices"][0]["message"]["content"])
print(f"{u['completion_tokens']} tokens after a {u['prompt_tokens']}-token prompt in {secs:.2f} s "
      f"({u['completion_tokens'] / secs:.0f} tok/s end to end, over HTTP and two links)")
PY

step "cluster health (the details need the key)"
# The conversation's state is kept in the prompt cache once its slot idles; the gateway learns of
# it with the engine's next status, within a second or two.
for _ in $(seq 30); do
  health=$(curl -s "http://127.0.0.1:$port/health" -H "Authorization: Bearer $key")
  echo "$health" | grep -q '"entries":0' || break
  sleep 0.1
done
echo "$health" | python3 -c '
import json, sys
h = json.load(sys.stdin)
print("state:", h["state"])
for n in h["nodes"]:
    print("  %s: link %s, %d bytes sent to it" % (n["name"], n["state"], n["bytes_to_worker"]))
pc = h["prompt_cache"]
print("prompt cache: %d conversation state(s) kept, each node its own part: %s" %
      (pc["entries"], ", ".join("%s %d bytes" % kv for kv in pc["bytes"].items())))
'

step "shut down"
cleanup
pids=()
echo "done"
