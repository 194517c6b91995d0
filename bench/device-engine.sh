# Sourced by the device scripts (device-writes.sh, device-placement.sh, device-reuse.sh): `engine`,
# one tandem-engine one-shot run of $model ($prompt, 540 tokens unless the script sets it; $n_predict,
# 256 unless set; greedy), printed as one line with a digest of its tokens, so that runs that must
# agree token for token can be compared by eye; and `gpu_tests`, the GPU tests of the RPC child's
# queued writes and of the head's queued local copies (tests/datapath/input_writes_test.cpp,
# tests/datapath/local_inputs_test.cpp: their cases in the CMake target datapath_test). Needs
# $root, $build, $model and $out. `seeded_worker` starts a worker for the scripts that split,
# `split_30_30` splits through it, `sentences N` makes a prompt.
# A prompt of $1 sentences of 12 tokens each.
sentences() { python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog and keeps running'] * $1))"; }
prompt=${prompt:-$(sentences 45)}
n_predict=${n_predict:-256}
context=${context:-4096}
# The GPU cases of datapath_test: each skips where no GPU is seen, so on the CPU they only build.
gpu_test_filter=${gpu_test_filter:-'InputWrites.*:*RepeatedInputs.*:LocalInputs.*:*LocalInputsOnAGpu.*'}
gpu_tests() {
  # The CMake target datapath_test (tests/datapath/), which `make test` builds and runs on every
  # CPU, where these cases skip; scripts/device-build.sh builds it beside tandem.
  local bin=$build/tests/datapath/datapath_test
  if [ ! -x "$bin" ]; then
    echo "no $bin: build it first (bench/device-compare.sh build)"
    return 1
  fi
  (cd "$(dirname "$bin")" && "$bin" --gtest_filter="$gpu_test_filter") >"$out/gpu_tests.log" 2>&1
  local status=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|Expected|Which is|element" "$out/gpu_tests.log" | head -30
  # The seeded load without mmap with the head's layer on the GPU, which libllama loads through its
  # staging buffers: what the head reads of the worker's share (tests/worker/seed_test.cpp).
  local seed=$build/tests/worker/worker_load_test
  if [ -x "$seed" ]; then
    (cd "$(dirname "$seed")" && "$seed" --gtest_filter='Seed.WithoutMmap*:Seed.TheHeadsOwn*') >"$out/seed_tests.log" 2>&1 ||
      status=1
    grep -E "^\[ +(OK|FAILED) +\]|seeded \(|staged reads|Failure|Expected" "$out/seed_tests.log" | head -12
  fi
  return $status
}
# A `tandem worker` with a cache seeded from $model (`tandem worker seed` with any extra flags, e.g.
# --layers 0-29), reached through `tandem link forward` on 127.0.0.1:50071; its cache listing in
# $out/listing.txt. Needs $pids (killed by the caller's trap).
seeded_worker() {  # cache folder, seed flags...
  local cache=$1; shift
  "$build/tandem" worker seed -m "$model" --cache-dir "$cache" "$@" >"$out/seed.log" 2>&1 || { cat "$out/seed.log"; exit 1; }
  find "$cache" -maxdepth 1 -type f -printf '%f %s\n' | grep -E '^[0-9a-f]+ [0-9]+$' >"$out/listing.txt"
  "$build/tandem" secret new -o "$out/cluster.key" >/dev/null
  "$build/tandem" worker --listen 127.0.0.1:50070 --secret-file "$out/cluster.key" --name w --cache-dir "$cache" \
    >"$out/worker.log" 2>&1 & pids+=($!)
  sleep 2
  "$build/tandem" link forward --to 127.0.0.1:50070 --secret-file "$out/cluster.key" --listen 127.0.0.1:50071 \
    >"$out/forward.log" 2>&1 & pids+=($!)
  sleep 1
}
# A one-shot split of the 60-layer $model, 30 + 30, through the worker of `seeded_worker` (its layers first).
# Then the worker's RPC child's own account of the session (its graphs' time against the head's wait).
split_30_30() {  # label, engine flags...
  local label=$1 before i; shift
  before=$(grep -c "the session's steps" "$out/worker.log")
  engine "$label" --rpc 127.0.0.1:50071 --worker-cache 127.0.0.1:50071="$out/listing.txt" --layer-split 30,30 --workers-first "$@"
  for i in 1 2 3 4 5 6; do
    [ "$(grep -c "the session's steps" "$out/worker.log")" -gt "$before" ] && break
    sleep 0.5
  done
  grep -h "the session's steps" "$out/worker.log" | tail -n +$((before + 1)) | sed 's/.*the session/    worker: the session/'
}
engine() {  # label, engine args...
  local label=$1; shift
  local f="$out/engine-${label//[ ,()]/_}.json"
  "$build/tandem-engine" engine -m "$model" -c "$context" --prompt "$prompt" -n "$n_predict" --ignore-eos --json "$@" >"$f" 2>>"$out/engine.log"
  python3 - "$label" "$f" <<'PY'
import hashlib, json, sys
label, path = sys.argv[1], sys.argv[2]
try:
    j = json.load(open(path))
    digest = hashlib.sha256(json.dumps(j["tokens"]).encode()).hexdigest()[:12]
    reuse = f"  {j['input_copies']} copies, {j['input_bytes_not_sent'] / 2**20:.0f} MiB not sent" if j.get("input_copies") else ""
    if j.get("slotted_inputs"):
        reuse += f"  slots: {j['slotted_inputs']} inputs, {j['slot_bytes_not_sent'] / 2**20:.0f} MiB not sent"
    if j.get("local_inputs_staged"):
        reuse += (f"  local: {j['local_inputs_staged']} staged, {j['local_inputs_repeated']} repeated, "
                  f"{j['local_input_bytes_not_copied'] / 2**20:.0f} MiB not copied")
    if j.get("worker_results_repeated"):
        reuse += (f"  worker results: {j['worker_results_repeated']} repeated, "
                  f"{j['worker_result_bytes_not_read'] / 2**20:.0f} MiB not read")
    if j.get("run_inputs"):
        reuse += f"  runs: {j['run_inputs']} inputs, {j['run_bytes_not_sent'] / 2**20:.0f} MiB not sent"
    if j.get("local_casts"):
        reuse += f"  casts made here: {j['local_casts']}, {j['local_cast_bytes'] / 2**20:.0f} MiB not read"
    if j.get("worker_embeddings"):
        reuse += "  rows gathered on the worker"
    if j.get("relayed_results"):
        reuse += f"  relayed: {j['relayed_results']} repeated, {j['relayed_bytes_not_read'] / 2**20:.0f} MiB not read"
    print(f"{label:44s} {j['decode_tps']:6.1f} tok/s decode {1000 / j['decode_tps']:6.2f} ms/token "
          f"{j['prefill_tps']:6.0f} prefill  load {j['load_s']:5.1f} s  tokens {digest}{reuse}")
    for phase in ("prefill", "decode"):
        p = j.get(phase + "_profile")
        if p and p["runs"]:
            print(f"    {phase:8s} {p['runs']:4d} runs {p['run_s']:7.3f} s in them: to workers {p['to_workers_s']:.3f}, "
                  f"from workers {p['from_workers_s']:.3f}, to the head's GPU {p['to_local_s']:.3f}, "
                  f"launching {p.get('launch_s', 0):.3f}, device waits {p.get('sync_s', 0):.3f}")
except Exception:
    print(f"{label:44s} FAILED")
PY
}
