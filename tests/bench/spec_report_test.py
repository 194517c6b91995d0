#!/usr/bin/env python3
"""bench/spec_report.py on made-up runs: the `speculative` object results.json promises (decode per
configuration and acceptance length, the ratios, the verify cost from /health's counters, the goal)
and what results.md names. usage: spec_report_test.py PATH/TO/spec_report.py"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPORT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../bench/spec_report.py")


def decode(config, length, tps, acceptance=None, warmup=None, after=None):
    figures = {"decode_tps": {"median": tps, "samples": [tps]}}
    if acceptance is not None:
        figures["spec_acceptance_length"] = {"median": acceptance, "samples": [acceptance]}
    return {"config": config, "length": length, "draft_max": 4, "load_s": 5.0, "link_bytes": 0,
            "warmup": warmup or {}, "bench": {"model": "bench", "figures": figures}, "after": after}


def health(steps, draft_s, verify_s):
    return {"mode": "draft", "steps": steps, "drafted": 4 * steps, "accepted": 2 * steps,
            "draft_seconds": draft_s, "verify_seconds": verify_s}


def point(k, tokens, decode_s, steps=0, verify_s=0.0, draft_s=0.0):
    return {"k": k, "requests": 2, "tokens": tokens, "decode_s": decode_s, "steps": steps, "drafted": k * steps,
            "accepted": k * steps, "draft_seconds": draft_s, "verify_seconds": verify_s}


RUNS = [
    decode("tandem-split", "off", 100.0),
    decode("stock-split-graphs", "off", 90.0),
    decode("single", "off", 105.0),
    decode("tandem-single", "off", 110.0),
    # 64 steps over the bench's requests: 0.064 s drafting (1 ms a step), 0.96 s verifying (15 ms).
    decode("tandem-split", "3.0", 190.0, 3.0, {"speculative": health(10, 0.5, 2.0)}, health(74, 0.564, 2.96)),
    decode("stock-split-graphs", "3.0", 150.0, warmup={"draft_n": 40, "draft_n_accepted": 20}),
    decode("single", "3.0", 200.0, warmup={"draft_n": 40, "draft_n_accepted": 21}),
    decode("tandem-single", "3.0", 215.0, 3.0),
    {"config": "tandem-split", "kind": "verify", "draft_max": 2, "load_s": 5.0, "points": [
        # 254 decoded tokens in 2.54 s, 10 ms each, 2 ms of which the draft model reading them.
        point(0, 256, 2.54, draft_s=0.508),
        point(1, 256, 1.5, steps=100, verify_s=1.2, draft_s=0.1),
        point(2, 256, 1.2, steps=80, verify_s=1.2, draft_s=0.16)]},
    decode("tandem-split", "1.5", 120.0, 1.5),
    {"config": "stock-split-graphs", "length": "1.5", "error": "did not start"},
    {"config": "single", "length": "1.5", "skipped": "deadline"},
    {"config": "tandem-single", "kind": "verify", "skipped": "deadline"},
]


class SpecReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "runs.jsonl"), "w") as f:
                f.write("\n".join(json.dumps(r) for r in RUNS) + "\n")
            with open(os.path.join(d, "model.json"), "w") as f:
                json.dump({"active_bytes_per_token": 2_187_136_192, "files": ["/tmp/m3-experts-proxy.gguf"],
                           "n_layer": 7, "n_expert": 128, "n_expert_used": 4, "active_bytes": {"routed_experts": 1}}, f)
            subprocess.run([sys.executable, REPORT, os.path.join(d, "runs.jsonl"), os.path.join(d, "model.json"),
                            os.path.join(d, "out"), "abc1234", "h100"], check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(d, "out", "results.json")) as f, open(os.path.join(d, "out", "results.md")) as g:
                cls.results, cls.md = json.load(f), g.read()
        cls.s = cls.results["speculative"]

    def test_results_name_what_was_measured(self):
        r = self.results
        self.assertEqual((r["commit"], r["machine"], r["model"]), ("abc1234", "h100", "m3-experts-proxy.gguf"))
        self.assertEqual(r["model_info"]["n_expert"], 128)
        self.assertEqual(len(r["runs"]), len(RUNS))

    def test_decode_per_configuration_and_length_with_its_ratios(self):
        s = self.s
        self.assertEqual(s["lengths"], ["off", "1.5", "3.0"])
        self.assertEqual(s["draft_max"], 4)
        self.assertEqual(s["decode_tps"]["tandem-split"], {"off": 100.0, "3.0": 190.0, "1.5": 120.0})
        self.assertAlmostEqual(s["decode_ratio_vs_no_spec"]["tandem-split"]["3.0"], 1.9)
        self.assertAlmostEqual(s["decode_ratio_vs_no_spec"]["tandem-single"]["3.0"], 215 / 110)
        self.assertIsNone(s["decode_ratio_vs_no_spec"]["stock-split-graphs"]["1.5"])  # it did not start
        self.assertAlmostEqual(s["vs_llama_server_spec"]["stock-split-graphs"]["3.0"], 190 / 150)
        self.assertAlmostEqual(s["vs_llama_server_spec"]["single"]["3.0"], 190 / 200)
        self.assertAlmostEqual(s["vs_llama_server_spec"]["stock-split-graphs"]["off"], 100 / 90)

    def test_acceptance_from_health_and_from_llama_servers_counts(self):
        self.assertEqual(self.s["acceptance_length"]["tandem-split"]["3.0"], 3.0)
        # 40 drafted in drafts of 4: ~10 steps, 20 accepted: 3 tokens a step.
        self.assertAlmostEqual(self.s["acceptance_length"]["stock-split-graphs"]["3.0"], 3.0)

    def test_draft_and_verify_time_per_step_over_the_figures(self):
        self.assertAlmostEqual(self.s["draft_seconds_per_step"]["tandem-split"]["3.0"], 0.001)
        self.assertAlmostEqual(self.s["verify_seconds_per_step"]["tandem-split"]["3.0"], 0.015)
        self.assertNotIn("tandem-single", self.s["draft_seconds_per_step"])  # no /health figures given

    def test_the_verify_cost_is_a_steps_time_over_a_one_token_step(self):
        v = self.s["verify"]["split"]
        self.assertAlmostEqual(v["one_token_ms"], 10.0)
        self.assertAlmostEqual(v["mirror_ms_per_token"], 2.0)
        # The engine's 12 and 15 ms steps over the target's 8 ms token.
        for got, want in zip(self.s["verify_cost"]["split"], [1.5, 1.875]):
            self.assertAlmostEqual(got, want)
        for got, want in zip(v["draft_ms_per_step"], [1.0, 2.0]):
            self.assertAlmostEqual(got, want)
        # The client's 15 ms steps: over its 10 ms token, and less drafting over the target's 8 ms.
        for got, want in zip(v["wall_cost"], [1.5, 1.5]):
            self.assertAlmostEqual(got, want)
        for got, want in zip(self.s["verify_cost_wall"]["split"], [14 / 8, 13 / 8]):
            self.assertAlmostEqual(got, want)
        self.assertEqual(v["acceptance_length"], [2.0, 3.0])

    def test_the_goal_at_3(self):
        g = self.s["goal"]
        self.assertAlmostEqual(g["ratio"], 1.9)
        self.assertAlmostEqual(g["stock_split_ratio"], 150 / 90)
        self.assertTrue(g["ratio_at_least_1_8"])
        self.assertTrue(g["ratio_at_least_stock_split"])
        self.assertTrue(g["decode_at_least_stock_split_spec"])

    def test_markdown_shows_the_tables_and_what_was_not_measured(self):
        self.assertIn("| tandem-split | 100.0 | 120.0 (1.20×) | 190.0 (1.90×) |", self.md)
        self.assertIn("Verify cost, tandem-split", self.md)
        self.assertIn("stock-split-graphs 1.5: did not start", self.md)
        self.assertIn("single 1.5: deadline", self.md)
        self.assertIn("tandem-single verify: deadline", self.md)
        self.assertNotIn("single", self.s["verify"])


if __name__ == "__main__":
    unittest.main()
