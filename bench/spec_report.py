#!/usr/bin/env python3
"""Turns bench/speculation.sh's runs into results.json and results.md (the `speculative` object).

usage: spec_report.py RUNS.jsonl MODEL.json OUT_DIR COMMIT MACHINE

RUNS.jsonl has one line per measurement:
  decode   {"config", "length": "off" or L, "draft_max", "load_s", "warmup", "bench", "after"}: one
           launch measured by `tandem bench` (decode_tps), with spec_client.py's warm-up (llama-server's
           drafted and accepted tokens; tandem's /health `speculative` before the figures) and
           tandem's /health `speculative` after them
  verify   {"config", "kind": "verify", "draft_max", "points"}: spec_client.py verify's groups of
           requests with "speculative.n_max": k on a launch that accepts every drafted token
  failed or skipped  {"config", "length", "error"} or {..., "skipped"}: named in results.md
MODEL.json is `tandem inspect --json` of the model.

A verify step of k drafted tokens carries k+1 tokens. A 1-token step is the k = 0 requests' time
per decoded token (the client's: first to last token) less the draft model's reading of each token
(draft_seconds' growth at k = 0: a request without drafts still feeds the draft model). Per k:
  verify_cost       verify_seconds / steps ÷ a 1-token step. tandem's engine times llama_decode and
                    its wait for the devices after it (the draft model's reading of the batch overlaps)
  verify_cost_wall  (the client's time per step - draft_seconds / steps) ÷ a 1-token step: the
                    whole step less its drafting, sampling and streaming included as at k = 0
  wall_cost         the client's time per step ÷ its time per token at k = 0, drafting included
"""
import json
import os
import sys


def load_json(path):
    with open(path) as f:
        return json.load(f)


def save_json(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)

CONFIGS = ["tandem-split", "stock-split-graphs", "single", "tandem-single"]
VERIFY_KEYS = {"tandem-split": "split", "tandem-single": "single"}
GOAL_LENGTH, GOAL_RATIO = "3.0", 1.8


def median_figure(bench, name):
    f = (bench or {}).get("figures", {}).get(name)
    return f["median"] if f else None


def per_step(before, after, field):
    """after[field] - before[field] over the steps between the two /health readings."""
    if not before or not after or after.get(field) is None or before.get(field) is None:
        return None
    steps = after.get("steps", 0) - before.get("steps", 0)
    return (after[field] - before[field]) / steps if steps > 0 else None


def decode_figures(runs):
    """Per configuration and length: decode tok/s, the acceptance length seen, and tandem's draft
    and verify seconds per step over the bench's requests."""
    tps, acceptance, draft_s, verify_s = {}, {}, {}, {}
    for r in runs:
        if r.get("kind") == "verify" or "bench" not in r:
            continue
        c, length = r["config"], r["length"]
        d = median_figure(r["bench"], "decode_tps")
        if d is None:
            continue
        tps.setdefault(c, {})[length] = d
        seen = median_figure(r["bench"], "spec_acceptance_length")
        w = r.get("warmup") or {}
        if seen is None and length != "off" and w.get("draft_n"):
            # llama-server counts drafted and accepted tokens only: with drafts of draft_max tokens
            # (p_min 0 drafts every position), steps ≈ drafted ÷ draft_max.
            seen = 1 + w.get("draft_n_accepted", 0) / (w["draft_n"] / r["draft_max"])
        if length != "off":
            acceptance.setdefault(c, {})[length] = seen
        before = w.get("speculative")
        for out, field in ((draft_s, "draft_seconds"), (verify_s, "verify_seconds")):
            v = per_step(before, r.get("after"), field)
            if v is not None:
                out.setdefault(c, {})[length] = v
    return tps, acceptance, draft_s, verify_s


def verify_curve(run):
    """A verify run's figures: the 1-token step, and per k the step's time, its ratio to a 1-token
    step three ways, the draft's time and the tokens per step."""
    points = {p["k"]: p for p in run["points"]}
    p0 = points.get(0)
    decoded0 = p0["tokens"] - p0["requests"] if p0 else 0  # a request's first token is its prompt's
    one = p0["decode_s"] / decoded0 if decoded0 > 0 else None
    # At k = 0 nothing is drafted, but the draft model still reads every token (the mirror):
    # draft_seconds' growth per token is that, and a 1-token step of the target alone is the rest.
    mirror = p0["draft_seconds"] / decoded0 if one and p0.get("draft_seconds") is not None else None
    target_one = one - mirror if one and mirror is not None else one
    out = {"draft_max": run["draft_max"], "one_token_ms": one * 1e3 if one else None,
           "mirror_ms_per_token": mirror * 1e3 if mirror is not None else None,
           "step_ms": [], "cost": [], "wall_step_ms": [], "wall_cost": [], "wall_verify_cost": [],
           "draft_ms_per_step": [], "acceptance_length": []}
    ms = lambda v: v * 1e3 if v is not None else None
    for k in range(1, run["draft_max"] + 1):
        p = points.get(k, {})
        steps = p.get("steps") or 0
        step = p["verify_seconds"] / steps if steps and p.get("verify_seconds") is not None else None
        draft = p["draft_seconds"] / steps if steps and p.get("draft_seconds") is not None else None
        wall = p["decode_s"] / steps if steps and p.get("decode_s") else None
        out["step_ms"].append(ms(step))
        out["cost"].append(div(step, target_one))
        out["wall_step_ms"].append(ms(wall))
        out["wall_cost"].append(div(wall, one))
        out["wall_verify_cost"].append(div(wall - draft, target_one) if wall is not None and draft is not None else None)
        out["draft_ms_per_step"].append(ms(draft))
        out["acceptance_length"].append(1 + p["accepted"] / steps if steps and p.get("accepted") is not None else None)
    return out


def div(a, b):
    return a / b if a is not None and b else None


def speculative(runs):
    tps, acceptance, draft_s, verify_s = decode_figures(runs)
    lengths = sorted({length for c in tps.values() for length in c if length != "off"}, key=float)
    ratio_vs_off = {c: {length: div(v.get(length), v.get("off")) for length in lengths} for c, v in tps.items()}
    split = tps.get("tandem-split", {})
    vs_llama = {other: {length: div(split.get(length), tps[other].get(length)) for length in ["off"] + lengths}
                for other in ("stock-split-graphs", "single") if other in tps}
    curves = {VERIFY_KEYS.get(r["config"], r["config"]): verify_curve(r) for r in runs
              if r.get("kind") == "verify" and "points" in r}
    result = {
        "lengths": ["off"] + lengths,
        "draft_max": next((r["draft_max"] for r in runs if r.get("kind") != "verify" and r.get("length") != "off"
                           and "draft_max" in r), None),
        "decode_tps": tps,
        "acceptance_length": acceptance,
        "decode_ratio_vs_no_spec": ratio_vs_off,
        "vs_llama_server_spec": vs_llama,
        "draft_seconds_per_step": draft_s,
        "verify_seconds_per_step": verify_s,
        "verify_cost": {k: v["cost"] for k, v in curves.items()},
        "verify_cost_wall": {k: v["wall_verify_cost"] for k, v in curves.items()},
        "verify": curves,
    }
    r = ratio_vs_off.get("tandem-split", {}).get(GOAL_LENGTH)
    stock_r = ratio_vs_off.get("stock-split-graphs", {}).get(GOAL_LENGTH)
    vs_stock = vs_llama.get("stock-split-graphs", {}).get(GOAL_LENGTH)
    result["goal"] = {
        "length": GOAL_LENGTH, "ratio": r, "stock_split_ratio": stock_r, "tandem_vs_stock_split_spec": vs_stock,
        "ratio_at_least_1_8": r >= GOAL_RATIO if r is not None else None,
        "ratio_at_least_stock_split": r >= stock_r if r is not None and stock_r is not None else None,
        "decode_at_least_stock_split_spec": vs_stock >= 1.0 if vs_stock is not None else None,
    }
    return result


def fmt(v, f="{:.2f}"):
    return "-" if v is None else f.format(v)


def markdown(result, runs):
    s = result["speculative"]
    lengths = s["lengths"]
    configs = [c for c in CONFIGS if c in s["decode_tps"]] + [c for c in s["decode_tps"] if c not in CONFIGS]
    md = ["# Speculative decoding, side by side", "",
          f"commit `{result['commit']}`, machine `{result['machine']}`, model `{result['model']}`, "
          f"{result['active_bytes_per_token'] / 1e9:.3f} GB read per generated token; draft model "
          f"`{result.get('draft', '-')}`, draft_max {s['draft_max']}, synthetic acceptance lengths "
          f"{', '.join(lengths[1:])}", "",
          "Decode tok/s at concurrency 1 (÷ the same configuration without speculation):", "",
          "| configuration | " + " | ".join(lengths) + " |", "|---|" + "---|" * len(lengths)]
    for c in configs:
        cells = [fmt(s["decode_tps"][c].get("off"), "{:.1f}")]
        cells += [f"{fmt(s['decode_tps'][c].get(length), '{:.1f}')} ({fmt(s['decode_ratio_vs_no_spec'][c].get(length))}×)"
                  for length in lengths[1:]]
        md.append(f"| {c} | " + " | ".join(cells) + " |")
    md += ["", "Acceptance length seen (tandem: /health over the figures' requests; llama-server: its warm-up's "
           "drafted and accepted tokens, ≈):", "", "| configuration | " + " | ".join(lengths[1:]) + " |",
           "|---|" + "---|" * (len(lengths) - 1)]
    for c, v in s["acceptance_length"].items():
        md.append(f"| {c} | " + " | ".join(fmt(v.get(length)) for length in lengths[1:]) + " |")
    md += ["", "tandem-split ÷ llama.cpp with the same speculation:", "", "| ÷ | " + " | ".join(lengths) + " |",
           "|---|" + "---|" * len(lengths)]
    for other, v in s["vs_llama_server_spec"].items():
        md.append(f"| {other} | " + " | ".join(fmt(v.get(length)) for length in lengths) + " |")
    for name, key in (("draft", "draft_seconds_per_step"), ("verify", "verify_seconds_per_step")):
        if s[key]:
            md += ["", f"tandem's {name} time per step over the figures' requests (ms): " + "; ".join(
                f"{c} " + ", ".join(f"{length} {v * 1e3:.2f}" for length, v in sorted(d.items())) for c, d in s[key].items())]
    for name, v in s["verify"].items():
        md += ["", f"Verify cost, tandem-{name} (draft_max {v['draft_max']}, every draft accepted; a 1-token step "
               f"{fmt(v['one_token_ms'])} ms by the client, the draft model's reading of it "
               f"{fmt(v['mirror_ms_per_token'])} ms of that):", "", "| k (step of k+1 tokens) | " +
               " | ".join(str(k) for k in range(1, v["draft_max"] + 1)) + " |", "|---|" + "---|" * v["draft_max"]]
        for row, key in (("verify ms (engine: decode and wait)", "step_ms"), ("÷ 1-token step", "cost"),
                         ("step ms (client)", "wall_step_ms"), ("÷ 1-token step", "wall_cost"),
                         ("draft ms per step", "draft_ms_per_step"), ("step less draft ÷ 1-token step", "wall_verify_cost"),
                         ("tokens per step", "acceptance_length")):
            md.append(f"| {row} | " + " | ".join(fmt(x) for x in v[key]) + " |")
    g = s["goal"]
    md += ["", f"Goal at {g['length']}: tandem-split's speed-up {fmt(g['ratio'])}× (≥ {GOAL_RATIO}: "
           f"{g['ratio_at_least_1_8']}), the stock split's {fmt(g['stock_split_ratio'])}× (tandem's ≥ it: "
           f"{g['ratio_at_least_stock_split']}); tandem-split with speculation ÷ the stock split with the same: "
           f"{fmt(g['tandem_vs_stock_split_spec'])} (≥ 1: {g['decode_at_least_stock_split_spec']})"]
    load = {f"{r['config']} {r.get('length', 'verify')}": r["load_s"] for r in runs if r.get("load_s") is not None}
    md += ["", "load (s): " + ", ".join(f"{k} {v:.1f}" for k, v in load.items())]
    missing = [f"{r['config']} {r.get('length', 'verify')}: {r.get('error') or r.get('skipped')}" for r in runs
               if r.get("error") or r.get("skipped")]
    if missing:
        md += ["", "Not measured: " + "; ".join(missing)]
    return md + [""]


def main():
    runs_path, model_path, out, commit, machine = sys.argv[1:6]
    with open(runs_path) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    model = load_json(model_path)
    result = {
        "commit": commit,
        "machine": machine,
        "model": os.path.basename(model["files"][0]),
        "active_bytes_per_token": model["active_bytes_per_token"],
        # What bench/spec_model.py needs of the model to compare the verify cost with the experts a
        # batch of tokens reads.
        "model_info": {k: model.get(k) for k in ("n_layer", "n_layer_dense_lead", "n_expert", "n_expert_used",
                                                  "n_expert_shared", "active_bytes")},
        **({"draft": os.environ["DRAFT_NAME"]} if os.environ.get("DRAFT_NAME") else {}),
        "speculative": speculative(runs),
        "runs": runs,
    }
    os.makedirs(out, exist_ok=True)
    save_json(result, os.path.join(out, "results.json"))
    md = markdown(result, runs)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
