#!/usr/bin/env python3
"""Predicts decode tok/s of one stream on two boxes: the layer split against the FFN tensor split.

usage: tp_model.py MODEL.json EXCHANGE.json [--bandwidth 273e9] [--latency-us 0,5,20,50]
                   [--device-us 10] [--efficiency 1,0.5] [--json OUT.json]

MODEL.json is `tandem inspect --json` of the model (a header-only file does: `tandem synth --preset
m3-proxy --header-only`); EXCHANGE.json is bench/exchange.sh's output. Per generated token:

  layer split   both boxes take turns, each reading its half of the active bytes:
                t = active / (bandwidth x efficiency) + 2 x (hop + latency)
                hop: one message of the hidden state (f32), measured as an `exchange` round.
  ffn-tensor    both boxes at once: each reads the duplicated part (attention, router, norms) and
                half of the FFNs (routed, shared, dense) and of the output head:
                t = (dup + split / 2) / (bandwidth x efficiency) + (layers + 1) x (x + device)
                x: one swap of the hidden state's partial sums per layer (and of the sampler's
                candidates once), `exchange` + latency when the boxes swap directly, `reduce` +
                2 x latency when one box makes the sum (as through the head); device: the copies of
                the partial sum off and onto the GPU and the add, per layer (an assumption: --device-us).

The cable's latency is added here because the kernel of the machines that measured has no netem.
`efficiency` scales the bandwidth to what decode reaches (1: the bound; ~0.5: the ~10 tok/s that the
hand-made layer split reaches on two GB10 boxes against its ~20 tok/s bound).
"""
import argparse
import json
import sys


def interpolate(points, x):
    """Linear interpolation (and extrapolation from the ends) of sorted (x, y) points."""
    points = sorted(points)
    if len(points) == 1:
        return points[0][1]
    lo, hi = points[0], points[1]
    for a, b in zip(points, points[1:]):
        lo, hi = a, b
        if x <= b[0]:
            break
    return lo[1] + (hi[1] - lo[1]) * (x - lo[0]) / (hi[0] - lo[0])


def split_bytes(model):
    a = model["active_bytes"]
    dup = a["attention"] + a["router"] + a["norm"] + a["embedding"] + a.get("other", 0)
    split = a["routed_experts"] + a["shared_experts"] + a["dense_ffn"] + a["output"]
    return dup, split


def predict(model, exchange, bandwidth, latencies_us, device_us, efficiencies):
    dup, split = split_bytes(model)
    active = dup + split
    hidden = model["n_embd"] * 4
    layers = model["n_layer"]
    paths = sorted({(r["path"], r["rate"]) for r in exchange})
    rows = []
    for path, rate in paths:
        cost = {kind: interpolate([(r["bytes"], r["median_us"]) for r in exchange
                                   if (r["path"], r["rate"], r["kind"]) == (path, rate, kind)], hidden)
                for kind in ("exchange", "reduce")}
        for lat in latencies_us:
            for eff in efficiencies:
                read = lambda b: b / (bandwidth * eff)
                t_layer = read(active) + 2 * (cost["exchange"] + lat) * 1e-6
                direct = (cost["exchange"] + lat + device_us) * 1e-6
                via_one = (cost["reduce"] + 2 * lat + device_us) * 1e-6
                t_direct = read(dup + split / 2) + (layers + 1) * direct
                t_via = read(dup + split / 2) + (layers + 1) * via_one
                # The swap cost per layer at which the tensor split only matches the layer split.
                break_even_us = (t_layer - read(dup + split / 2)) / (layers + 1) * 1e6
                rows.append({"path": path, "rate": rate, "latency_us": lat, "efficiency": eff,
                             "exchange_us": cost["exchange"], "reduce_us": cost["reduce"],
                             "layer_split_tps": 1 / t_layer, "ffn_tensor_direct_tps": 1 / t_direct,
                             "ffn_tensor_via_one_box_tps": 1 / t_via,
                             "direct_vs_layer": t_layer / t_direct, "via_one_box_vs_layer": t_layer / t_via,
                             "break_even_swap_us": break_even_us})
    return {"model": model.get("name", ""), "n_layer": layers, "hidden_bytes": hidden, "active_bytes": active,
            "duplicated_bytes": dup, "split_bytes": split, "per_box_bytes_tensor": dup + split / 2,
            "bandwidth": bandwidth, "device_us": device_us, "rows": rows}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("exchange")
    p.add_argument("--bandwidth", type=float, default=273e9, help="bytes/s of each box (GB10: 273e9)")
    p.add_argument("--latency-us", default="0,5,20,50", help="one-way cable latency added, microseconds")
    p.add_argument("--device-us", type=float, default=10.0, help="per-layer device copies and add, microseconds")
    p.add_argument("--efficiency", default="1,0.5", help="fractions of the bandwidth decode reaches")
    p.add_argument("--json", help="write the prediction here")
    a = p.parse_args()
    model = json.load(open(a.model))
    exchange = json.load(open(a.exchange))
    r = predict(model, exchange, a.bandwidth, [float(x) for x in a.latency_us.split(",")], a.device_us,
                [float(x) for x in a.efficiency.split(",")])
    if a.json:
        json.dump(r, open(a.json, "w"), indent=2)
    print(f"{r['model']}: {r['active_bytes'] / 1e9:.2f} GB read per token; the tensor split reads "
          f"{r['per_box_bytes_tensor'] / 1e9:.2f} GB on each box ({r['duplicated_bytes'] / 1e9:.2f} duplicated), "
          f"{r['n_layer'] + 1} swaps of {r['hidden_bytes']} B per token; {a.bandwidth / 1e9:.0f} GB/s per box, "
          f"{a.device_us:.0f} us of device copies per swap")
    print()
    print("| path | rate | latency us | efficiency | swap us (exchange / reduce) | layer split tok/s | "
          "ffn-tensor direct tok/s | ffn-tensor via one box tok/s | direct ÷ layer | break-even swap us |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in r["rows"]:
        print(f"| {x['path']} | {x['rate']} | {x['latency_us']:.0f} | {x['efficiency']:.2f} | "
              f"{x['exchange_us']:.1f} / {x['reduce_us']:.1f} | {x['layer_split_tps']:.1f} | "
              f"{x['ffn_tensor_direct_tps']:.1f} | {x['ffn_tensor_via_one_box_tps']:.1f} | "
              f"{x['direct_vs_layer']:.2f} | {x['break_even_swap_us']:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
