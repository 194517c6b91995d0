#!/usr/bin/env python3
"""Predicts MiniMax-M3's decode with speculative decoding on two GB10-class boxes (layer split).

usage: spec_model.py RESULTS.json [--target M3.json] [--bandwidth 273e9] [--link-ms 1.0]
                     [--acceptance 2.7,3.1,3.5] [--draft-max 4] [--draft-gb 3.5] [--efficiency 1,0.5] [--json OUT]
       spec_model.py --example [the same options]

RESULTS.json is bench/speculation.sh's (its `speculative` object: the verify cost curve of
tandem-split, the draft's time per step, and decode without and with speculation on the proxy it
measured, with the proxy's bytes in `model_info`); --example runs without one, on the assumptions
below alone. --target is `tandem inspect --json` of the model predicted (default: MiniMax-M3 as
IQ4_XS, the figures of `tandem synth --preset m3 --header-only`: 14.08 GB read per token, of which
6.86 GB the 4 routed experts used of 128).

One step of a layer split over two boxes reads every layer's weights once, box after box, and
crosses the link: t(1 token) = active bytes / (bandwidth x efficiency) + link (52.6 ms at 273 GB/s
and the 1.0 ms link `tandem plan` counts: its 19.0 tok/s bound). A verify step of k drafted tokens
carries k+1 tokens; on a MoE it reads the union of their routed experts. With random routing, E
experts and u used per token, n tokens use on average

    D(n) = E x (1 - (1 - u/E)^n)      distinct experts per layer (n = 1: u; n -> inf: E)

so the step reads F + R x D(k+1)/u bytes (F: everything but the routed experts, read once; R: one
token's routed experts), and costs cost(k) = t(k+1 tokens) / t(1 token) of a 1-token step.
Real routing correlates neighbouring tokens' experts, so D is an upper bound of what they read.

The measured curve (tandem-split on the proxy: a step's time less its drafting ÷ a 1-token step's,
bench/spec_report.py's verify_cost_wall, else its verify_cost) is shown
beside the proxy's own D-based cost, and turned into experts read: implied D(k+1)/u =
(cost x (F+R) - F) / R of the proxy, i.e. as if all of a 1-token step's time were reading weights
(fixed per-step costs on the GPU dilute it, so it is a lower bound of what the step read). The
"measured" prediction applies that implied union to the target's bytes; where it exceeds every
expert of the proxy, the step was not bound by its weights' bytes and nothing is mapped.

The draft (assumption, --draft-gb): MiniMax-M3's published EAGLE3 draft, one decoder layer of the
target's width with `fc` over three taps and its own 200064-row output head, ~3.3B parameters, all
read for every drafted token, as Q8_0 (8.5 bits): 3.5 GB, 12.8 ms per drafted token at 273 GB/s,
on the head box while the other waits; a draft of k tokens runs k such steps (a chain, as llama.cpp
drafts). The per-drafted-token overhead measured on the GPU with the tiny synthetic draft (its
bytes are negligible: what remains is launches and sampling) is added; 0 with --example.

Per acceptance length L (tokens a step gives, the target's own included; the EAGLE3 draft's
published 2.7-3.5, taken at drafts of --draft-max tokens):
    decode = L / (t1 x cost(k) + k x t_draft),  speed-up = decode x t1
and the verify cost at which the speed-up would reach 1.8 (break_even_cost_1_8), with the
union of experts that cost allows.
"""
import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_report import load_json, save_json  # noqa: E402  (beside this script)

# `tandem inspect --json` of `tandem synth --preset m3 --header-only` (IQ4_XS), the parts this
# model reads.
M3 = {"name": "MiniMax-M3 IQ4_XS", "n_layer": 60, "n_expert": 128, "n_expert_used": 4,
      "active_bytes": {"attention": 4307309568, "routed_experts": 6858473472, "shared_experts": 1714618368,
                       "dense_ffn": 360972288, "router": 179335680, "norm": 1474560, "output": 653033472,
                       "embedding": 3264, "other": 0}}
DRAFT_GB = 3.3 * 8.5 / 8  # 3.3B parameters as Q8_0, all read per drafted token
GOAL = 1.8


def distinct_experts(tokens, experts, used):
    """Expected distinct experts per layer that `tokens` tokens use, each `used` of `experts` at random."""
    return experts * (1 - (1 - used / experts) ** tokens)


def split_bytes(model):
    """(F, R): bytes a token reads besides the routed experts, and its routed experts' bytes."""
    a = model["active_bytes"]
    routed = a["routed_experts"]
    return sum(a.values()) - routed, routed


def union(model, k):
    """D(k+1)/u: the routed experts a step of k+1 tokens reads, in units of one token's."""
    return distinct_experts(k + 1, model["n_expert"], model["n_expert_used"]) / model["n_expert_used"]


def cost_of_union(model, u):
    """A step's bytes ÷ a 1-token step's when it reads `u` tokens' worth of routed experts."""
    f, r = split_bytes(model)
    return (f + r * u) / (f + r)


def implied_union(model, cost):
    """The union of experts a measured cost corresponds to if a step's time were all weight reads."""
    f, r = split_bytes(model)
    return (cost * (f + r) - f) / r


def step_times(model, bandwidth, link_s, efficiency):
    """(t1, bytes part of t1): a 1-token step of the layer split, and its weight-read part."""
    f, r = split_bytes(model)
    read = (f + r) / (bandwidth * efficiency)
    return read + link_s, read


def predict(model, acceptance, k, cost, bandwidth, link_s, efficiency, draft_bytes, draft_overhead_s):
    """One stream's decode with speculation: drafts of k tokens, a verify step costing `cost` x the
    weight reads of a 1-token step (the link crossed once either way), acceptance length L."""
    t1, read = step_times(model, bandwidth, link_s, efficiency)
    draft_step = k * (draft_bytes / (bandwidth * efficiency) + draft_overhead_s)
    step = read * cost + link_s + draft_step
    decode = acceptance / step
    # The verify cost at which the speed-up reaches GOAL: L / (GOAL x t1) = read x c + link + draft.
    break_even = (acceptance / (GOAL / t1) - link_s - draft_step) / read
    free = acceptance / (read * cost + link_s) * t1
    return {"acceptance": acceptance, "k": k, "efficiency": efficiency, "verify_cost": cost, "speedup_free_draft": free,
            "no_spec_tps": 1 / t1, "draft_ms_per_step": draft_step * 1e3, "step_ms": step * 1e3,
            "decode_tps": decode, "speedup": decode * t1, "break_even_cost_1_8": break_even,
            "break_even_union_1_8": implied_union(model, break_even) if break_even > 0 else None}


def per_token_acceptance(length, k):
    """p such that drafts of k tokens, each kept with probability p^i at position i (a chain: the
    i-th only if every earlier one was), give `length` tokens per step: 1 + p + ... + p^k = length
    (llama.cpp's synthetic acceptance resolves its rates the same way)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid ** i for i in range(1, k + 1)) < length - 1 else (lo, mid)
    return (lo + hi) / 2


def best_draft_length(model, length, k_ref, k_max, bandwidth, link_s, efficiency, draft_bytes, draft_overhead_s):
    """The draft length of the best speed-up (experts model), the acceptance length `length` seen
    at drafts of k_ref tokens carried to other lengths by a per-token acceptance p."""
    p = per_token_acceptance(length, k_ref)
    best = None
    for k in range(1, k_max + 1):
        acc = 1 + sum(p ** i for i in range(1, k + 1))
        x = predict(model, acc, k, cost_of_union(model, union(model, k)), bandwidth, link_s, efficiency,
                    draft_bytes, draft_overhead_s)
        if best is None or x["speedup"] > best["speedup"]:
            best = x
    return {**best, "p": p}


def measured_curve(results):
    """tandem-split's measured verify cost per k (index k-1), or []: the client's time per step less
    drafting where measured (the engine's own timing of a step can end before a GPU's work does)."""
    s = results.get("speculative", {})
    wall = s.get("verify_cost_wall", {}).get("split", [])
    return list(wall) if any(c is not None for c in wall) else list(s.get("verify_cost", {}).get("split", []))


def measured_draft_overhead_s(results):
    """Seconds per drafted token of the measured draft (median over k of draft time per step ÷ k)."""
    v = results.get("speculative", {}).get("verify", {}).get("split", {})
    per = [ms / 1e3 / k for k, ms in enumerate(v.get("draft_ms_per_step", []), 1) if ms is not None]
    return statistics.median(per) if per else 0.0


def proxy_check(results, proxy):
    """On the proxy itself: the speed-up the step model predicts from the verify curve and the
    draft's time per step, beside tandem-split's measured one, per synthetic acceptance length."""
    s = results.get("speculative", {})
    curve, dm = measured_curve(results), s.get("draft_max")
    off = s.get("decode_tps", {}).get("tandem-split", {}).get("off")
    rows = []
    if not off or not dm or len(curve) < dm or curve[dm - 1] is None:
        return rows
    t1 = 1 / off
    for length, measured in s.get("decode_ratio_vs_no_spec", {}).get("tandem-split", {}).items():
        draft = s.get("draft_seconds_per_step", {}).get("tandem-split", {}).get(length)
        if draft is None:
            continue
        rows.append({"length": float(length), "predicted": float(length) / (curve[dm - 1] + draft / t1),
                     "measured": measured})
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="?", help="bench/speculation.sh's results.json")
    p.add_argument("--example", action="store_true", help="no results: the documented assumptions alone")
    p.add_argument("--target", help="`tandem inspect --json` of the model predicted (default MiniMax-M3 IQ4_XS)")
    p.add_argument("--bandwidth", type=float, default=273e9, help="bytes/s of each box (GB10: 273e9)")
    p.add_argument("--link-ms", type=float, default=1.0, help="the link's time per step (tandem plan: 1.0)")
    p.add_argument("--acceptance", default="2.7,3.1,3.5", help="tokens per step (EAGLE3 draft, published)")
    p.add_argument("--draft-max", type=int, default=4, help="tokens drafted per step")
    p.add_argument("--draft-gb", type=float, default=DRAFT_GB, help="GB the draft reads per drafted token")
    p.add_argument("--efficiency", default="1,0.5", help="fractions of the bandwidth decode reaches")
    p.add_argument("--json", help="write the prediction here")
    a = p.parse_args(argv)
    if not a.example and not a.results:
        p.error("give RESULTS.json or --example")
    results = {} if a.example else load_json(a.results)
    target = load_json(a.target) if a.target else M3
    proxy = results.get("model_info") or None
    acceptances = [float(x) for x in a.acceptance.split(",")]
    if max(acceptances) > a.draft_max + 1:
        p.error(f"an acceptance length above draft_max + 1 = {a.draft_max + 1} is impossible")
    curve = measured_curve(results)
    overhead = measured_draft_overhead_s(results)
    k_max = max(len(curve), a.draft_max)

    # The verify cost: experts model and, where measured, the measured one mapped onto the target.
    rows = []
    for k in range(1, k_max + 1):
        row = {"k": k, "distinct_experts": distinct_experts(k + 1, target["n_expert"], target["n_expert_used"]),
               "target_cost": cost_of_union(target, union(target, k))}
        if proxy and proxy.get("active_bytes"):
            row["proxy_cost"] = cost_of_union(proxy, union(proxy, k))
        m = curve[k - 1] if k <= len(curve) else None
        if m is not None and proxy and proxy.get("active_bytes"):
            row["measured_cost"] = m
            row["implied_union"] = implied_union(proxy, m)
            # More than every expert's bytes: the proxy's step was not bound by reading weights (a
            # CPU, a tiny model), and its curve says nothing about the target's bytes.
            if row["implied_union"] <= proxy["n_expert"] / proxy["n_expert_used"]:
                row["target_cost_measured"] = cost_of_union(target, max(1.0, row["implied_union"]))
        rows.append(row)

    predictions = []
    for eff in (float(x) for x in a.efficiency.split(",")):
        for acc in acceptances:
            for source in ("experts", "measured"):
                r = rows[a.draft_max - 1]
                cost = r["target_cost"] if source == "experts" else r.get("target_cost_measured")
                if cost is None:
                    continue
                x = predict(target, acc, a.draft_max, cost, a.bandwidth, a.link_ms * 1e-3, eff,
                            a.draft_gb * 1e9, overhead)
                x["source"] = source
                predictions.append(x)
    best = [{**best_draft_length(target, acc, a.draft_max, 8, a.bandwidth, a.link_ms * 1e-3, eff, a.draft_gb * 1e9,
                                 overhead), "acceptance_at_draft_max": acc}
            for eff in (float(x) for x in a.efficiency.split(",")) for acc in acceptances]
    check = proxy_check(results, proxy)
    out = {"target": target.get("name", ""), "bandwidth": a.bandwidth, "link_ms": a.link_ms, "draft_gb": a.draft_gb,
           "draft_overhead_ms_per_token": overhead * 1e3, "draft_max": a.draft_max, "verify_cost": rows,
           "predictions": predictions, "best_draft_length": best, "proxy_check": check, "example": a.example}
    if a.json:
        save_json(out, a.json)

    e, u = target["n_expert"], target["n_expert_used"]
    f, r = split_bytes(target)
    print(f"{out['target']}: {(f + r) / 1e9:.2f} GB read per token, {r / 1e9:.2f} GB of it its {u} routed experts of {e}; "
          f"two boxes of {a.bandwidth / 1e9:.0f} GB/s, link {a.link_ms:.1f} ms: {1 / step_times(target, a.bandwidth, a.link_ms * 1e-3, 1)[0]:.1f} tok/s bound")
    print(f"draft: {a.draft_gb:.2f} GB read per drafted token ({a.draft_gb * 1e9 / a.bandwidth * 1e3:.1f} ms at full bandwidth)"
          f" + {overhead * 1e3:.2f} ms overhead per drafted token ({'measured' if overhead else 'none assumed'}); "
          f"drafts of {a.draft_max} tokens" + ("; --example: no measurement, the experts model only" if a.example else ""))
    print()
    print(f"Verify step of k+1 tokens ÷ a 1-token step (D: distinct experts per layer, random routing, {u} of {e}):")
    print("| k | D(k+1) | target, experts model | proxy, experts model | proxy, measured (tandem-split) | implied D/u | target from measured |")
    print("|---|---|---|---|---|---|---|")
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    for x in rows:
        mapped = fmt(x.get("target_cost_measured")) if "target_cost_measured" in x or "measured_cost" not in x \
            else "- (beyond every expert)"
        print(f"| {x['k']} | {x['distinct_experts']:.1f} | {x['target_cost']:.2f} | {fmt(x.get('proxy_cost'))} | "
              f"{fmt(x.get('measured_cost'))} | {fmt(x.get('implied_union'))} | {mapped} |")
    print()
    print(f"Predicted decode of one stream, drafts of {a.draft_max} tokens:")
    print("| efficiency | acceptance | verify cost from | no spec tok/s | verify cost | draft ms/step | tok/s | speed-up | "
          f"speed-up, draft free | verify cost for {GOAL}x (D/u) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in predictions:
        be = "unreachable" if x["break_even_cost_1_8"] < 1 else f"{x['break_even_cost_1_8']:.2f} ({fmt(x['break_even_union_1_8'])})"
        print(f"| {x['efficiency']:.2f} | {x['acceptance']:.1f} | {x['source']} | {x['no_spec_tps']:.1f} | {x['verify_cost']:.2f} | "
              f"{x['draft_ms_per_step']:.1f} | {x['decode_tps']:.1f} | {x['speedup']:.2f} | {x['speedup_free_draft']:.2f} | {be} |")
    print()
    print(f"The best draft length (experts model; the acceptance at {a.draft_max} tokens carried to others by a per-token p):")
    print("| efficiency | acceptance at draft_max | p | best k | its acceptance | verify cost | tok/s | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for x in best:
        print(f"| {x['efficiency']:.2f} | {x['acceptance_at_draft_max']:.1f} | {x['p']:.2f} | {x['k']} | {x['acceptance']:.2f} | "
              f"{x['verify_cost']:.2f} | {x['decode_tps']:.1f} | {x['speedup']:.2f} |")
    if check:
        print()
        print("The step model on the proxy (tandem-split: verify cost at draft_max, measured draft time per step):")
        for c in check:
            print(f"  synthetic length {c['length']:.1f}: predicted speed-up {c['predicted']:.2f}, measured {fmt(c['measured'])}")


if __name__ == "__main__":
    sys.exit(main())
