#!/usr/bin/env python3
"""bench/report.py on made-up runs: the fields results.json promises, medians over rounds, ratios
per prompt size, and the spread table. usage: report_test.py PATH/TO/report.py"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPORT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../bench/report.py")


def figure(samples, unit="tok/s"):
    s = sorted(samples)
    return {"samples": samples, "median": s[len(s) // 2], "min": s[0], "max": s[-1], "unit": unit}


def run(config, rnd, decode, p512, p4096, load_s=5.0, link_bytes=0):
    return {"config": config, "round": rnd, "load_s": load_s, "link_bytes": link_bytes, "bench": {"model": "bench", "figures": {
        "decode_tps": figure(decode), "prefill_tps_512": figure(p512), "prefill_tps_4096": figure(p4096),
        "ttft_ms": figure([300.0, 310.0, 320.0], "ms"), "aggregate_tps": figure([80.0, 82.0, 84.0])}}}


def report_in(d, runs):
    """Runs report.py on `runs` in folder `d`: results.json, results.md and the plot's path."""
    with open(os.path.join(d, "runs.jsonl"), "w") as f:
        f.write("\n".join(json.dumps(r) for r in runs) + "\n")
    with open(os.path.join(d, "model.json"), "w") as f:
        json.dump({"active_bytes_per_token": 13_918_301_952, "files": ["/models/m3-proxy.gguf"]}, f)
    subprocess.run([sys.executable, REPORT, os.path.join(d, "runs.jsonl"), os.path.join(d, "model.json"),
                    os.path.join(d, "out"), "abc1234", "h200"], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(d, "out", "results.json")) as f, open(os.path.join(d, "out", "results.md")) as g:
        return json.load(f), g.read(), os.path.join(d, "out", "results.svg")


class Report(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.results, self.md = self.report(self.RUNS)

    RUNS = [
            {"config": "tandem-cold", "round": 1, "load_s": 60.0, "link_bytes": 16_000_000_000},
            run("single", 1, [50.0, 56.0, 58.0], [1800.0, 1900.0, 2000.0], [2000.0, 2100.0, 2450.0], 5.0),
            run("stock-split", 1, [40.0, 41.0, 42.0], [1300.0, 1310.0, 1320.0], [1000.0, 1080.0, 1100.0], 48.0),
            run("tandem-split", 1, [57.0, 57.5, 58.0], [2000.0, 2040.0, 2100.0], [2200.0, 2300.0, 2330.0], 5.2, 13_000_000),
            run("single", 2, [55.0, 57.0, 57.5], [1850.0, 1950.0, 1960.0], [1900.0, 2000.0, 2400.0], 6.0),
            run("stock-split", 2, [39.0, 40.0, 41.0], [1250.0, 1300.0, 1350.0], [1050.0, 1070.0, 1200.0], 50.0),
            run("tandem-split", 2, [55.0, 56.0, 56.5], [2000.0, 2030.0, 2050.0], [2210.0, 2310.0, 2340.0], 5.8, 15_000_000),
    ]

    def report(self, runs):
        results, md, self.svg = report_in(tempfile.mkdtemp(dir=self.dir.name), runs)
        return results, md

    def tearDown(self):
        self.dir.cleanup()

    def test_results_name_what_was_measured(self):
        r = self.results
        self.assertEqual((r["commit"], r["machine"], r["model"]), ("abc1234", "h200", "m3-proxy.gguf"))
        self.assertEqual(r["active_bytes_per_token"], 13_918_301_952)
        self.assertAlmostEqual(r["physical_limit_tps"], 4.8e12 / 13_918_301_952)
        self.assertIsNone(r["vs_tandem_single"])  # not measured in these runs
        with open(self.svg) as f:
            self.assertIn("tandem-split", f.read())

    def test_figures_are_the_median_over_rounds_of_each_rounds_median(self):
        f = self.results["figures"]
        self.assertEqual(f["single"]["decode_tps"], (56.0 + 57.0) / 2)
        self.assertEqual(f["tandem-split"]["prefill_tps_4096"], (2300.0 + 2310.0) / 2)
        # prefill_tps is the 512-token prompt's, as in llama-bench's pp512.
        self.assertEqual(f["tandem-split"]["prefill_tps"], f["tandem-split"]["prefill_tps_512"])
        self.assertNotIn("stock-split-graphs", f)

    def test_every_prompt_size_has_its_ratios(self):
        r = self.results
        self.assertAlmostEqual(r["vs_single"]["prefill_tps_4096"], 2305.0 / 2050.0)
        self.assertAlmostEqual(r["ratios"]["prefill_tps_4096"], 2305.0 / 1075.0)
        self.assertAlmostEqual(r["vs_single"]["decode_tps"], 56.75 / 56.5)
        for name in ("decode_tps", "prefill_tps", "ttft_ms", "aggregate_tps", "prefill_tps_4096"):
            self.assertIn(name, r["ratios"])
            self.assertIsNone(r["ratios_best_stock"][name])  # no stock-split-graphs in these runs

    def test_loads_and_link_bytes(self):
        r = self.results
        self.assertEqual(r["load_s"], {"single": 5.5, "stock": 49.0, "cold": 60.0, "seeded": 5.5})
        self.assertEqual(r["link_bytes"], {"load_cold": 16_000_000_000, "load_seeded": 14_000_000})

    def test_markdown_shows_the_4096_row_and_each_configurations_spread(self):
        self.assertRegex(self.md, r"\| prefill_tps_4096 \| 2050\.0 \| 1075\.0 \| - \| 2305\.0 \| 2\.14 \| - \| 1\.12 \|")
        self.assertIn("Spread: every sample of 2 round(s)", self.md)
        # single's 4096-token samples over both rounds: 1900 to 2450, median of the six.
        self.assertIn("| prefill_tps_4096 | 2050.0 (1900.0–2450.0) |", self.md)

    def test_decode_after_a_long_prompt_and_more_streams_get_rows_and_ratios(self):
        runs = [dict(r) for r in self.RUNS]
        for r, (after, agg16) in zip((r for r in runs if "bench" in r),
                                     [(40.0, 150.0), (30.0, 100.0), (41.0, 160.0), (42.0, 152.0), (31.0, 98.0), (40.0, 158.0)]):
            r["bench"] = {"model": "bench", "figures": dict(r["bench"]["figures"],
                          decode_tps_after_16384=figure([after]), aggregate_tps_16=figure([agg16]))}
        results, md = self.report(runs)
        self.assertEqual(results["figures"]["single"]["decode_tps_after_16384"], 41.0)
        self.assertAlmostEqual(results["vs_single"]["decode_tps_after_16384"], 40.5 / 41.0)
        self.assertAlmostEqual(results["vs_single"]["aggregate_tps_16"], 159.0 / 151.0)
        names = [line.split(" | ")[0] for line in md.splitlines() if line.startswith("| ")]
        # Prefill sizes first, then decode after a long prompt, then the stream counts.
        self.assertLess(names.index("| prefill_tps_4096"), names.index("| decode_tps_after_16384"))
        self.assertLess(names.index("| decode_tps_after_16384"), names.index("| aggregate_tps_16"))

    def test_every_configurations_decode_is_a_fraction_of_the_bandwidth_bound(self):
        bound = 4.8e12 / 13_918_301_952
        f = self.results["bandwidth_fraction"]
        self.assertAlmostEqual(f["single"], 56.5 / bound)
        self.assertAlmostEqual(f["tandem-split"], 56.75 / bound)
        self.assertIn("decode as a fraction of the bandwidth bound", self.md)
        self.assertIn(f"tandem-split {56.75 / bound:.2f}", self.md)

    def test_tandem_in_one_process_gets_a_column_and_its_ratios_when_measured(self):
        runs = self.RUNS + [run("tandem-single", 1, [62.0, 63.0, 64.0], [2300.0, 2400.0, 2500.0], [2500.0, 2600.0, 2700.0])]
        results, md = self.report(runs)
        self.assertAlmostEqual(results["vs_tandem_single"]["decode_tps"], 56.75 / 63.0)
        self.assertAlmostEqual(results["vs_tandem_single"]["prefill_tps_4096"], 2305.0 / 2600.0)
        self.assertIn("| tandem-split | tandem-single | tandem ÷ stock | tandem ÷ best stock | tandem ÷ single | tandem ÷ tandem-single |", md)
        self.assertIn("| prefill_tps_4096 | 2050.0 | 1075.0 | - | 2305.0 | 2600.0 | 2.14 | - | 1.12 | 0.89 |", md)
        self.assertEqual(results["load_s"]["tandem_single"], 5.0)
        self.assertNotIn("tandem-single", self.md)


class PromptCacheReport(unittest.TestCase):
    """Runs of `tandem bench --conversations --only-conversations`: the prompt_cache object."""

    def conv(self, config, rnd, cold, returning, restore=None, state=None):
        figs = {"cold_ttft_ms": figure(cold, "ms"), "returning_ttft_ms": figure(returning, "ms"),
                "continuing_ttft_ms": figure([90.0, 95.0, 100.0], "ms")}
        if restore is not None:
            figs.update({"link_bytes_per_restore": figure(restore, "B"), "link_bytes_per_save": figure([900.0] * 3, "B"),
                         "state_kv_bytes": figure(state, "B"), "state_worker_kv_bytes": figure([s / 2 for s in state], "B")})
        return {"config": config, "round": rnd, "load_s": 5.0, "link_bytes": 0, "bench": {"model": "bench", "figures": figs}}

    def test_the_prompt_cache_object_has_the_figures_the_issue_names(self):
        runs = [self.conv("stock-split-cache", 1, [3000.0] * 3, [1500.0] * 3),
                self.conv("tandem-split", 1, [3400.0, 3500.0, 3600.0], [150.0, 160.0, 170.0], [1000.0] * 3, [2e9] * 3),
                self.conv("tandem-split", 2, [3300.0, 3400.0, 3500.0], [140.0, 150.0, 160.0], [1200.0] * 3, [2e9] * 3)]
        with tempfile.TemporaryDirectory() as d:
            r, md, _ = report_in(d, runs)
        pc = r["prompt_cache"]
        for k in ("cold_ttft_ms", "returning_ttft_ms", "link_bytes_per_restore", "state_kv_bytes"):
            self.assertIn(k, pc)
        self.assertEqual(pc["cold_ttft_ms"], 3450.0)  # the median of the rounds' medians
        self.assertEqual(pc["returning_ttft_ms"], 155.0)
        self.assertAlmostEqual(pc["returning_vs_cold"], 155.0 / 3450.0)
        self.assertAlmostEqual(pc["link_bytes_per_restore_vs_state"], 1100.0 / 2e9)
        self.assertEqual(pc["by_config"]["stock-split-cache"]["returning_ttft_ms"], 1500.0)
        self.assertNotIn("link_bytes_per_restore", pc["by_config"]["stock-split-cache"])
        self.assertIn("| returning_ttft_ms | 1500.0 | 155.0 |", md)


if __name__ == "__main__":
    unittest.main(verbosity=2)
