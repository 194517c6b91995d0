#!/usr/bin/env bash
# What swapping a layer's partial sums over tandem's link costs (issue: tensor-parallel FFNs):
# `tandem link exchange` against a `tandem worker` on loopback, then through a veth pair into a
# network namespace, unshaped and shaped by a token bucket at each rate of RATES. Each measures
# both kinds: `exchange` (both boxes send at once and read the other's: one-way latency, the
# direct worker-to-worker swap) and `reduce` (one box sends, the other answers once it has the
# message: a round trip, the sum made on one box, as through the head).
#
#   bench/exchange.sh BUILD_DIR [OUT_DIR]     (root for the namespace; default OUT_DIR: bench/results/<date>-<host>-exchange)
#
# Environment: BYTES (message sizes, default 24576,49152,98304: MiniMax-M3's hidden state in f32,
# two and four of them), ROUNDS (default 3000), RATES (default "200gbit 100gbit 25gbit").
# Writes exchange.json (one record per path, rate, kind and size) and prints a table. Added
# latency is not emulated: this kernel has no netem (tc's delay), so bench/tp_model.py adds the
# cable's latency to these figures (once per exchange, twice per reduce).
set -euo pipefail
build=$(cd "${1:?usage: exchange.sh BUILD_DIR [OUT_DIR]}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$here/bench/results/$(date +%Y-%m-%d)-$(hostname)-exchange}
bytes=${BYTES:-24576,49152,98304}
rounds=${ROUNDS:-3000}
mkdir -p "$out"
work=$(mktemp -d)
ns=tandem-ex$$ host_if=tex$$ peer_if=texp$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$host_if" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$build/tandem" secret new -o "$work/cluster.key" >/dev/null
records="$work/records.jsonl"
: > "$records"

measure() {  # path rate address
  "$build/tandem" link exchange --to "$3" --secret-file "$work/cluster.key" --bytes "$bytes" --rounds "$rounds" --json |
    python3 -c "import json,sys
for r in json.load(sys.stdin): print(json.dumps(dict(r, path='$1', rate='$2')))" >> "$records"
}

echo "exchange: loopback" >&2
"$build/tandem" worker --listen 127.0.0.1:47111 --secret-file "$work/cluster.key" --name loop >"$work/loop.log" 2>&1 &
pids+=($!)
sleep 1
measure loopback none 127.0.0.1:47111

if [ "$(id -u)" = 0 ] && ip netns add "$ns" 2>/dev/null; then
  ip link add "$host_if" type veth peer name "$peer_if"
  ip link set "$peer_if" netns "$ns"
  ip addr add 10.213.0.1/30 dev "$host_if" && ip link set "$host_if" up
  ip netns exec "$ns" ip addr add 10.213.0.2/30 dev "$peer_if"
  ip netns exec "$ns" ip link set "$peer_if" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" "$build/tandem" worker --listen 10.213.0.2:47112 --secret-file "$work/cluster.key" --name veth \
    --no-private-netns >"$work/veth.log" 2>&1 &
  pids+=($!)
  sleep 1
  for rate in none ${RATES:-200gbit 100gbit 25gbit}; do
    echo "exchange: veth, rate $rate" >&2
    for dev in "$host_if" "ns:$peer_if"; do
      run=(); d=$dev
      [ "${dev#ns:}" != "$dev" ] && run=(ip netns exec "$ns") d=${dev#ns:}
      "${run[@]}" tc qdisc del dev "$d" root 2>/dev/null || true
      # A bucket deep enough for the rate's 4 ms of bytes, so that the cap, not the bucket, binds.
      [ "$rate" != none ] && "${run[@]}" tc qdisc add dev "$d" root tbf rate "$rate" burst 64mbit latency 10ms
    done
    measure veth "$rate" 10.213.0.2:47112
  done
else
  echo "exchange: no network namespace (needs root): loopback only" >&2
fi

python3 - "$records" "$out/exchange.json" <<'EOF'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump(records, open(sys.argv[2], "w"), indent=2)
print(f"{'path':9} {'rate':8} {'kind':9} {'bytes':>7} {'median us':>10} {'p10':>7} {'p90':>7}")
for r in records:
    print(f"{r['path']:9} {r['rate']:8} {r['kind']:9} {r['bytes']:>7} {r['median_us']:>10.1f} {r['p10_us']:>7.1f} {r['p90_us']:>7.1f}")
EOF
echo "exchange: $out/exchange.json" >&2
