#!/usr/bin/env python3
"""Turns bench/compare.sh's runs into results.json, results.md and results.svg.

usage: report.py RUNS.jsonl MODEL.json OUT_DIR COMMIT MACHINE
       report.py --svg RESULTS.json OUT_DIR   (the plot again from a results.json)
"""
import json
import os
import statistics
import sys

# (name in results.json, key in `tandem bench --json`); prefill_tps is the 512-token prompt's, as
# in llama-bench's pp512, and every prompt size measured gets its own prefill_tps_N as well; so do
# decode after a long prompt (decode_tps_after_N, `tandem bench --decode-after`) and each further
# stream count (aggregate_tps_N, `--concurrency 4,16`).
FIGURES = [("decode_tps", "decode_tps"), ("prefill_tps", "prefill_tps_512"), ("ttft_ms", "ttft_ms"),
           ("aggregate_tps", "aggregate_tps")]
CONFIGS = ["single", "stock-split", "stock-split-graphs", "tandem-split"]
# Optional: tandem serve with every layer on the head, for the split's cost inside tandem's engine;
# llama-server's own prompt cache (--cache-ram) over the stock split with graphs, for the prompt
# cache's comparison.
EXTRA_CONFIGS = ["tandem-single", "stock-split-cache"]
# `tandem bench --conversations`: the prompt cache's figures, reported in their own object.
PROMPT_CACHE = ["cold_ttft_ms", "returning_ttft_ms", "continuing_ttft_ms", "returning_link_bytes",
                "continuing_link_bytes", "link_bytes_per_restore", "link_bytes_per_save", "state_kv_bytes",
                "state_worker_kv_bytes"]


def columns(configs_present):
    """The table's configurations: the four always, an extra one when it was measured."""
    return CONFIGS + [c for c in EXTRA_CONFIGS if c in configs_present]


def write_svg(figures, names, out):
    """One bar group per figure: each configuration relative to single."""
    colors = {"single": "#888", "stock-split": "#d95f02", "stock-split-graphs": "#e6ab02", "tandem-split": "#1b9e77",
              "tandem-single": "#7570b3", "stock-split-cache": "#a6761d"}
    configs = columns(figures)
    w, h, bar = 200 + 170 * len(names), 320, 28
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           '<text x="10" y="18">relative to single (higher is better; ttft: lower is better)</text>']
    for gi, n in enumerate(names):
        base = figures.get("single", {}).get(n)
        x0 = 40 + gi * 170
        svg.append(f'<text x="{x0}" y="{h - 8}">{n}</text>')
        for ci, c in enumerate(configs):
            v = figures.get(c, {}).get(n)
            if not base or v is None:
                continue
            rel = v / base
            bh = min(rel, 2.0) * 100
            x = x0 + ci * (bar + 4)
            svg.append(f'<rect x="{x}" y="{h - 30 - bh:.0f}" width="{bar}" height="{bh:.0f}" fill="{colors[c]}"/>')
            svg.append(f'<text x="{x}" y="{h - 34 - bh:.0f}" font-size="10">{rel:.2f}</text>')
    for ci, c in enumerate(configs):
        svg.append(f'<rect x="{w - 170}" y="{30 + ci * 16}" width="10" height="10" fill="{colors[c]}"/>'
                   f'<text x="{w - 155}" y="{39 + ci * 16}">{c}</text>')
    svg.append("</svg>")
    open(os.path.join(out, "results.svg"), "w").write("\n".join(svg))


SIZED = ("prefill_tps_", "decode_tps_after_", "aggregate_tps_")


def sized_figures(measured):
    """The sized figures of one run (prefill_tps_N, decode_tps_after_N, aggregate_tps_N), in that
    order, smallest size first within each."""
    sized = lambda prefix: sorted((k for k in measured if k.startswith(prefix) and k[len(prefix):].isdigit()),
                                  key=lambda k: int(k.rsplit("_", 1)[1]))
    return [k for prefix in SIZED for k in sized(prefix)]


def figure_names(figures):
    """The figures a report compares: FIGURES, then each other size's."""
    seen = {k for f in figures.values() for k in f}
    return [n for n, _ in FIGURES] + [k for k in sized_figures(seen) if k != "prefill_tps_512"]


def spread_table(runs, names):
    """Markdown lines: each configuration's figures as the median of every sample of every round,
    with the lowest and highest sample, so a ratio can be read against the noise."""
    rounds = max((r["round"] for r in runs if "bench" in r), default=0)
    configs = columns({r["config"] for r in runs})
    md = ["", f"Spread: every sample of {rounds} round(s), median (lowest–highest).", "",
          "| figure | " + " | ".join(configs) + " |", "|---|" + "---|" * len(configs)]
    keys = dict(FIGURES)
    for n in names:
        cells = []
        for c in configs:
            samples = [x for r in runs if r["config"] == c and "bench" in r
                       for x in r["bench"]["figures"].get(keys.get(n, n), {}).get("samples", [])]
            cells.append(f"{statistics.median(samples):.1f} ({min(samples):.1f}–{max(samples):.1f})" if samples else "-")
        md.append(f"| {n} | " + " | ".join(cells) + " |")
    return md


def prompt_cache_figures(runs):
    """The conversations' figures: per configuration, the median over rounds of each figure's
    median; tandem-split's at the top level (cold_ttft_ms, returning_ttft_ms,
    link_bytes_per_restore, state_kv_bytes, ...) with the ratios the prompt cache is judged by."""
    by_config = {}
    for r in runs:
        figs = r.get("bench", {}).get("figures", {})
        for name in PROMPT_CACHE:
            if name in figs:
                by_config.setdefault(r["config"], {}).setdefault(name, []).append(figs[name]["median"])
    if not by_config:
        return None
    by_config = {c: {n: statistics.median(v) for n, v in f.items()} for c, f in by_config.items()}
    out = dict(by_config.get("tandem-split", {}))
    if out.get("cold_ttft_ms") and "returning_ttft_ms" in out:
        out["returning_vs_cold"] = out["returning_ttft_ms"] / out["cold_ttft_ms"]
    if out.get("state_kv_bytes"):
        for k in ("link_bytes_per_restore", "link_bytes_per_save"):
            if k in out:
                out[k + "_vs_state"] = out[k] / out["state_kv_bytes"]
    out["by_config"] = by_config
    return out


def prompt_cache_table(pc):
    """Markdown lines: the conversations' figures side by side."""
    configs = list(pc["by_config"])
    md = ["", "Prompt cache: conversations taking turns on one slot (medians).", "",
          "| figure | " + " | ".join(configs) + " |", "|---|" + "---|" * len(configs)]
    for n in PROMPT_CACHE:
        cells = [pc["by_config"][c].get(n) for c in configs]
        if any(v is not None for v in cells):
            md.append(f"| {n} | " + " | ".join("-" if v is None else f"{v:.1f}" for v in cells) + " |")
    if "returning_vs_cold" in pc:
        md += ["", f"tandem-split: a returning turn's TTFT is {100 * pc['returning_vs_cold']:.1f}% of a cold one's"
               + (f"; a restore moves {100 * pc['link_bytes_per_restore_vs_state']:.3f}% of the state's KV bytes over the link"
                  if "link_bytes_per_restore_vs_state" in pc else "")
               + (f", a save {100 * pc['link_bytes_per_save_vs_state']:.3f}%" if "link_bytes_per_save_vs_state" in pc else "")]
    return md


def main():
    if sys.argv[1:2] == ["--svg"]:
        results = json.load(open(sys.argv[2]))
        write_svg(results["figures"], figure_names(results["figures"]), sys.argv[3])
        return
    runs_path, model_path, out, commit, machine = sys.argv[1:6]
    runs = [json.loads(line) for line in open(runs_path) if line.strip()]
    model = json.load(open(model_path))
    figures, load_s = {}, {}
    for config in CONFIGS + EXTRA_CONFIGS:
        mine = [r for r in runs if r["config"] == config]
        if not mine:
            continue
        fig = {}
        measured = mine[0]["bench"]["figures"]
        for name, key in FIGURES + [(k, k) for k in sized_figures(measured)]:
            if key in measured:
                fig[name] = statistics.median(r["bench"]["figures"][key]["median"] for r in mine)
        figures[config] = fig
        load_s[config] = statistics.median(r["load_s"] for r in mine)

    prompt_cache = prompt_cache_figures(runs)
    cold = [r for r in runs if r["config"] == "tandem-cold"]
    seeded = [r for r in runs if r["config"] == "tandem-split"]
    med = lambda rs, k: statistics.median(r[k] for r in rs) if rs and all(k in r for r in rs) else None

    def ratio(a, b, name):
        if a not in figures or b not in figures or not figures[b].get(name):
            return None
        return figures[a][name] / figures[b][name]

    names = figure_names(figures)
    bandwidth = float(os.environ.get("BANDWIDTH", "4.8e12"))
    active = model["active_bytes_per_token"]
    result = {
        "commit": commit,
        "machine": machine,
        "model": os.path.basename(model["files"][0]),
        "active_bytes_per_token": active,
        "figures": figures,
        "ratios": {n: ratio("tandem-split", "stock-split", n) for n in names},
        "ratios_best_stock": {n: ratio("tandem-split", "stock-split-graphs", n) for n in names},
        "vs_single": {n: ratio("tandem-split", "single", n) for n in names},
        # The split against tandem's own engine in one process, where that was measured.
        "vs_tandem_single": {n: ratio("tandem-split", "tandem-single", n) for n in names} if "tandem-single" in figures else None,
        "physical_limit_tps": bandwidth / active,
        "physical_limit_fraction": figures.get("single", {}).get("decode_tps", 0) / (bandwidth / active),
        # Every configuration's decode as a fraction of the bandwidth bound: how much of a token's
        # time is reading its weights.
        "bandwidth_fraction": {c: figures[c]["decode_tps"] / (bandwidth / active)
                               for c in figures if figures[c].get("decode_tps")},
        "load_s": {"single": load_s.get("single"), "stock": load_s.get("stock-split"),
                   "cold": med(cold, "load_s"), "seeded": med(seeded, "load_s"),
                   **({"tandem_single": load_s["tandem-single"]} if "tandem-single" in load_s else {})},
        "link_bytes": {"load_cold": med(cold, "link_bytes"), "load_seeded": med(seeded, "link_bytes")},
        **({"prompt_cache": prompt_cache} if prompt_cache else {}),
        "runs": runs,
    }
    os.makedirs(out, exist_ok=True)
    json.dump(result, open(os.path.join(out, "results.json"), "w"), indent=2)

    configs = columns(figures)
    extra = "tandem-single" in figures
    md = ["# Side-by-side comparison", "", f"commit `{commit}`, machine `{machine}`, model `{result['model']}`, "
          f"{active / 1e9:.3f} GB read per generated token", "",
          "| figure | " + " | ".join(configs) + " | tandem ÷ stock | tandem ÷ best stock | tandem ÷ single |" +
          (" tandem ÷ tandem-single |" if extra else ""),
          "|---|" + "---|" * (len(configs) + 3 + (1 if extra else 0))]
    for n in names:
        cells = [f"{figures[c][n]:.1f}" if c in figures and n in figures[c] else "-" for c in configs]
        rs = [result[k][n] for k in ("ratios", "ratios_best_stock", "vs_single") + (("vs_tandem_single",) if extra else ())]
        md.append(f"| {n} | " + " | ".join(cells) + " | " + " | ".join(f"{r:.2f}" if r else "-" for r in rs) + " |")
    md += spread_table(runs, names)
    md += ["", f"decode as a fraction of the bandwidth bound ({bandwidth / 1e12:.2f} TB/s ÷ {active / 1e9:.3f} GB = "
           f"{bandwidth / active:.1f} tok/s): " +
           ", ".join(f"{c} {f:.2f}" for c, f in result["bandwidth_fraction"].items())]
    md += ["", "load (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result["load_s"].items() if v is not None)]
    lb = result["link_bytes"]
    if lb["load_cold"]:
        md += ["", f"link bytes during load: cold {lb['load_cold'] / 1e9:.3f} GB, seeded "
               f"{(lb['load_seeded'] or 0) / 1e9:.3f} GB ({100 * (lb['load_seeded'] or 0) / lb['load_cold']:.2f}% of cold)"]
    elif lb["load_seeded"] is not None:
        md += ["", f"link bytes during a seeded load: {lb['load_seeded'] / 1e9:.3f} GB (no cold load this run)"]
    if prompt_cache:
        md += prompt_cache_table(prompt_cache)
    md += [""]
    open(os.path.join(out, "results.md"), "w").write("\n".join(md))

    write_svg(figures, names, out)
    print("\n".join(md))


if __name__ == "__main__":
    main()
