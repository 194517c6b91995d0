#!/usr/bin/env python3
"""bench/spec_model.py on made-up models and curves: the expected distinct experts, a verify step's
cost from its bytes and back, and the speed-up its docstring defines.
usage: spec_model_test.py PATH/TO/spec_model.py"""
import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import unittest

PATH = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../bench/spec_model.py")
spec = importlib.util.spec_from_file_location("spec_model", PATH)
sm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sm)

# 1000 bytes a token: 400 of routed experts (2 of 8 used), 600 of the rest.
MODEL = {"name": "m", "n_expert": 8, "n_expert_used": 2,
         "active_bytes": {"attention": 300, "routed_experts": 400, "shared_experts": 200, "output": 100}}


class SpecModel(unittest.TestCase):
    def test_distinct_experts_grow_from_the_used_ones_to_all_of_them(self):
        self.assertAlmostEqual(sm.distinct_experts(1, 128, 8), 8.0)
        self.assertAlmostEqual(sm.distinct_experts(2, 128, 8), 128 * (1 - (120 / 128) ** 2))  # 15.5: a little overlap
        self.assertAlmostEqual(sm.distinct_experts(1000, 128, 8), 128.0)
        self.assertAlmostEqual(sm.distinct_experts(3, 8, 8), 8.0)  # every expert used by every token

    def test_a_steps_cost_is_its_bytes_and_the_implied_union_inverts_it(self):
        self.assertEqual(sm.split_bytes(MODEL), (600, 400))
        self.assertAlmostEqual(sm.cost_of_union(MODEL, 1.0), 1.0)
        self.assertAlmostEqual(sm.cost_of_union(MODEL, 2.5), (600 + 1000) / 1000)
        self.assertAlmostEqual(sm.implied_union(MODEL, 1.6), 2.5)
        # Two tokens of 2 used experts among 8: 8 x (1 - (3/4)^2) = 3.5 distinct, 1.75 tokens' worth.
        self.assertAlmostEqual(sm.union(MODEL, 1), 1.75)

    def test_the_speedup_is_the_acceptance_over_the_step_with_its_draft(self):
        # 1000 bytes at 1000 B/s: a 1-token step of 1 s, no link; a verify step of cost 2, no draft.
        x = sm.predict(MODEL, 3.0, 4, 2.0, bandwidth=1000.0, link_s=0.0, efficiency=1.0, draft_bytes=0, draft_overhead_s=0)
        self.assertAlmostEqual(x["no_spec_tps"], 1.0)
        self.assertAlmostEqual(x["speedup"], 1.5)
        self.assertAlmostEqual(x["break_even_cost_1_8"], 3.0 / 1.8)
        # Drafts of 4 tokens of 50 bytes (0.05 s each at half the bandwidth, 0.1 s) plus 0.01 s each,
        # a link of 0.5 s crossed once per step: t1 = 2.5 s, a step 2 x 2 + 0.5 + 4 x 0.11 = 4.94 s.
        x = sm.predict(MODEL, 3.0, 4, 2.0, bandwidth=1000.0, link_s=0.5, efficiency=0.5, draft_bytes=50,
                       draft_overhead_s=0.01)
        self.assertAlmostEqual(x["step_ms"], 4940.0)
        self.assertAlmostEqual(x["speedup"], 3.0 / 4.94 * 2.5)
        self.assertAlmostEqual(x["speedup_free_draft"], 3.0 / 4.5 * 2.5)

    def test_the_per_token_acceptance_gives_the_acceptance_length(self):
        p = sm.per_token_acceptance(3.0, 4)
        self.assertAlmostEqual(1 + p + p ** 2 + p ** 3 + p ** 4, 3.0, places=6)
        self.assertAlmostEqual(sm.per_token_acceptance(5.0, 4), 1.0, places=6)

    def test_the_example_runs_without_results_and_gives_the_plans_bound(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            sm.main(["--example"])
        self.assertIn("19.0 tok/s bound", out.getvalue())  # `tandem plan`'s for M3 on two GB10 boxes

    def test_a_measured_curve_is_mapped_onto_the_target_and_checked_on_the_proxy(self):
        results = {"model_info": MODEL, "speculative": {
            "draft_max": 2, "verify_cost": {"split": [1.3, 1.6, 2.4]},
            "verify": {"split": {"draft_ms_per_step": [1.0, 2.0]}},
            "decode_tps": {"tandem-split": {"off": 100.0}},
            "decode_ratio_vs_no_spec": {"tandem-split": {"3.0": 1.5}},
            "draft_seconds_per_step": {"tandem-split": {"3.0": 0.002}}}}
        with tempfile.TemporaryDirectory() as d:
            path, model, out = (os.path.join(d, f) for f in ("results.json", "model.json", "out.json"))
            sm.save_json(results, path)
            sm.save_json(MODEL, model)
            with contextlib.redirect_stdout(io.StringIO()):
                sm.main([path, "--target", model, "--draft-max", "2", "--acceptance", "2.5", "--json", out])
            r = sm.load_json(out)
        rows = {x["k"]: x for x in r["verify_cost"]}
        self.assertAlmostEqual(rows[2]["implied_union"], 2.5)  # (1.6 x 1000 - 600) / 400
        self.assertAlmostEqual(rows[2]["target_cost_measured"], 1.6)  # the target here is the proxy
        # 2.4 would be 4.5 tokens' worth of experts, more than all 8 of the proxy's (4 tokens' worth of 2 used): not mapped.
        self.assertAlmostEqual(rows[3]["implied_union"], 4.5)
        self.assertNotIn("target_cost_measured", rows[3])
        self.assertAlmostEqual(r["draft_overhead_ms_per_token"], 1.0)  # 1 ms a drafted token at k = 1 and 2
        measured = [x for x in r["predictions"] if x["source"] == "measured"]
        self.assertEqual(len(measured), 2)  # one per efficiency
        check = r["proxy_check"][0]
        # 3 tokens a step; a step costs 1.6 one-token steps of 10 ms plus 2 ms of drafting.
        self.assertAlmostEqual(check["predicted"], 3.0 / (1.6 + 0.2))
        self.assertEqual(check["measured"], 1.5)


if __name__ == "__main__":
    unittest.main()
