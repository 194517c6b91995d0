# Sourced by the device scripts (device-writes.sh, device-placement.sh): one tandem-engine one-shot
# run of $model (540-token prompt, 256 tokens, greedy), printed as one line with a digest of its
# tokens, so that runs that must agree token for token can be compared by eye. Needs $build,
# $model and $out.
prompt=$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog and keeps running'] * 45))")
engine() {  # label, engine args...
  local label=$1; shift
  local f="$out/engine-${label//[ ,()]/_}.json"
  "$build/tandem-engine" engine -m "$model" -c 4096 --prompt "$prompt" -n 256 --ignore-eos --json "$@" >"$f" 2>>"$out/engine.log"
  python3 - "$label" "$f" <<'PY'
import hashlib, json, sys
label, path = sys.argv[1], sys.argv[2]
try:
    j = json.load(open(path))
    digest = hashlib.sha256(json.dumps(j["tokens"]).encode()).hexdigest()[:12]
    print(f"{label:44s} {j['decode_tps']:6.1f} tok/s decode {1000 / j['decode_tps']:6.2f} ms/token "
          f"{j['prefill_tps']:6.0f} prefill  load {j['load_s']:5.1f} s  tokens {digest}")
except Exception:
    print(f"{label:44s} FAILED")
PY
}
