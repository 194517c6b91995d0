#!/usr/bin/env python3
"""bench/spec_client.py against a fake server on loopback: each verify group's requests carry its
"speculative.n_max", stream, and its point holds the /health counters' growth over them; the
warm-up reports llama-server's drafted and accepted tokens. usage: spec_client_test.py PATH/TO/spec_client.py"""
import http.server
import importlib.util
import io
import json
import os
import sys
import threading
import unittest

PATH = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../bench/spec_client.py")
spec = importlib.util.spec_from_file_location("spec_client", PATH)
sc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sc)


class FakeServer(http.server.BaseHTTPRequestHandler):
    """tandem-like: a completion of n tokens with a draft bound k takes n / (k+1) steps, each
    counted on /health with 1 ms of drafting and 10 ms of verifying per step."""
    bodies = []
    counters = {"mode": "draft", "steps": 0, "drafted": 0, "accepted": 0, "draft_seconds": 0.0, "verify_seconds": 0.0}

    def log_message(self, *args):
        pass

    def reply(self, body, content_type="application/json"):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        assert self.path == "/health" and self.headers["Authorization"] == "Bearer k"
        self.reply(json.dumps({"speculative": self.counters}).encode())

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeServer.bodies.append(body)
        n, k = body["max_tokens"], body.get("speculative.n_max", 0)
        if k:
            steps = n // (k + 1)
            c = FakeServer.counters
            c.update(steps=c["steps"] + steps, drafted=c["drafted"] + k * steps, accepted=c["accepted"] + k * steps,
                     draft_seconds=c["draft_seconds"] + 0.001 * steps, verify_seconds=c["verify_seconds"] + 0.01 * steps)
        if not body["stream"]:
            self.reply(json.dumps({"usage": {"completion_tokens": n},
                                   "timings": {"draft_n": 40, "draft_n_accepted": 20}}).encode())
            return
        events = [{"choices": [{"text": "x"}]} for _ in range(n)] + [{"choices": [], "usage": {"completion_tokens": n}}]
        self.reply(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n",
                   "text/event-stream")


class SpecClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
        threading.Thread(target=cls.httpd.serve_forever, daemon=True).start()
        cls.server = sc.Server(f"http://127.0.0.1:{cls.httpd.server_address[1]}", "k", sleep=lambda s: None)

    @classmethod
    def tearDownClass(cls):
        cls.httpd.shutdown()
        cls.httpd.server_close()

    def test_each_group_sends_its_bound_and_counts_the_growth_of_the_counters(self):
        FakeServer.bodies.clear()
        r = sc.verify(self.server, [0, 1, 3], tokens=12, requests=2, prompt_tokens=8, rng=sc.random.Random(1),
                      log=io.StringIO())
        self.assertEqual([b["speculative.n_max"] for b in FakeServer.bodies], [0, 0, 1, 1, 3, 3])
        self.assertTrue(all(b["stream"] and b["ignore_eos"] and b["temperature"] == 0 for b in FakeServer.bodies))
        self.assertEqual(len({b["prompt"] for b in FakeServer.bodies}), 6)  # no prompt shares another's prefix
        p0, p1, p3 = r["points"]
        self.assertEqual((p0["k"], p0["tokens"], p0["steps"]), (0, 24, 0))
        self.assertEqual((p1["steps"], p1["accepted"]), (12, 12))  # 2 requests of 12 tokens, 2 a step
        self.assertEqual(p3["steps"], 6)
        self.assertAlmostEqual(p3["verify_seconds"], 0.06)
        self.assertAlmostEqual(p3["draft_seconds"], 0.006)

    def test_the_warmup_reports_what_llama_server_drafted(self):
        w = sc.warmup(self.server, 16, 8, sc.random.Random(2))
        self.assertEqual((w["tokens"], w["draft_n"], w["draft_n_accepted"]), (16, 40, 20))
        self.assertEqual(w["speculative"]["mode"], "draft")

    def test_a_missing_counter_grows_by_nothing_rather_than_failing(self):
        g = sc.growth({"steps": 1}, {"steps": 5})
        self.assertEqual(g["steps"], 4)
        self.assertIsNone(g["verify_seconds"])


if __name__ == "__main__":
    unittest.main()
