#!/usr/bin/env python3
"""bench/tp_model.py on a made-up model and link: the two splits' times as its docstring defines
them. usage: tp_model_test.py PATH/TO/tp_model.py"""
import importlib.util
import os
import sys
import unittest

PATH = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../bench/tp_model.py")
spec = importlib.util.spec_from_file_location("tp_model", PATH)
tp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tp)

MODEL = {"name": "m", "n_layer": 9, "n_embd": 1000,  # 4000-byte swaps, 10 per token
         "active_bytes": {"attention": 400, "router": 50, "norm": 25, "embedding": 25, "other": 0,
                          "routed_experts": 600, "shared_experts": 200, "dense_ffn": 100, "output": 100}}


def link(exchange_us, reduce_us):
    return [{"path": "p", "rate": "r", "kind": k, "bytes": b, "median_us": us}
            for k, us in (("exchange", exchange_us), ("reduce", reduce_us)) for b in (2000, 6000)]


class TpModel(unittest.TestCase):
    def test_free_swaps_give_the_ratio_of_the_bytes_each_box_reads(self):
        r = tp.predict(MODEL, link(0, 0), bandwidth=1000.0, latencies_us=[0], device_us=0, efficiencies=[1])
        self.assertEqual((r["duplicated_bytes"], r["split_bytes"], r["per_box_bytes_tensor"]), (500, 1000, 1000))
        row = r["rows"][0]
        self.assertAlmostEqual(row["layer_split_tps"], 1000 / 1500)
        self.assertAlmostEqual(row["ffn_tensor_direct_tps"], 1.0)
        self.assertAlmostEqual(row["direct_vs_layer"], 1.5)
        # The tensor split saves 0.5 s per token over 10 swaps: it breaks even at 50 ms a swap.
        self.assertAlmostEqual(row["break_even_swap_us"], 50000.0)

    def test_latency_counts_once_per_swap_and_twice_per_round_trip(self):
        r = tp.predict(MODEL, link(100, 300), bandwidth=1e12, latencies_us=[50], device_us=20, efficiencies=[1])
        row = r["rows"][0]
        read = lambda b: b / 1e12
        self.assertAlmostEqual(1 / row["layer_split_tps"], read(1500) + 2 * 150e-6)
        self.assertAlmostEqual(1 / row["ffn_tensor_direct_tps"], read(1000) + 10 * 170e-6)
        self.assertAlmostEqual(1 / row["ffn_tensor_via_one_box_tps"], read(1000) + 10 * 420e-6)

    def test_efficiency_scales_the_bandwidth_and_sizes_are_interpolated(self):
        measured = link(0, 0)
        for r in measured:
            r["median_us"] = r["bytes"] / 100  # 20 us at 2000 B, 60 at 6000: 40 at the model's 4000
        r = tp.predict(MODEL, measured, bandwidth=1e6, latencies_us=[0], device_us=0, efficiencies=[0.5])
        self.assertAlmostEqual(r["rows"][0]["exchange_us"], 40.0)
        self.assertAlmostEqual(1 / r["rows"][0]["layer_split_tps"], 1500 / 0.5e6 + 2 * 40e-6)


if __name__ == "__main__":
    unittest.main()
