#!/usr/bin/env python3
"""The requests of bench/speculation.sh that `tandem bench` does not send.

usage: spec_client.py warmup URL [--key KEY] [--tokens 48] [--prompt-tokens 64]
       spec_client.py health URL [--key KEY] [--once]
       spec_client.py summary BENCH.json WARMUP.json
       spec_client.py verify URL [--key KEY] [--k 0,1,...,8] [--tokens 128] [--requests 2] [--prompt-tokens 64]

warmup  one greedy completion before a configuration is measured (CUDA graphs, first-use
        allocations, for every batch size a draft brings), printed as JSON: the tokens, llama-server's
        own count of drafted and accepted tokens where it reports them (`timings.draft_n`,
        `draft_n_accepted`: whether it speculated at all), and tandem's /health `speculative`
        object once settled, the starting point of the figures that follow.
summary one line of a launch's figures: `tandem bench --json`'s decode (and acceptance), the warm-up's
        drafted and accepted tokens.
health  tandem's /health `speculative` object once settled (null on other servers or with it off);
        --once: one reading, for counters something else waited for (`tandem bench` does).
verify  for each k, REQUESTS streaming completions with `"speculative.n_max": k` (tandem's, and
        llama-server's name, of a request's draft bound) on a server started with
        `--spec-synth-len DRAFT_MAX+1` (every drafted token accepted, so a step carries k+1 tokens);
        prints JSON {"points": [{k, tokens, decode_s, steps, drafted, accepted, draft_seconds,
        verify_seconds}]}: the tokens and client-side decode time (first to last token) of the
        requests, and the /health counters' growth over them (null where /health lacks one).

tandem's gateway asks its engine for the counters every second: a reading counts once two readings
1.2 s apart agree (as `tandem bench` does).
"""
import argparse
import http.client
import json
import random
import sys
import time
import urllib.parse

FIELDS = ("steps", "drafted", "accepted", "draft_seconds", "verify_seconds")


class Server:
    def __init__(self, url, key, timeout=600, sleep=time.sleep):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.timeout, self.sleep = u.hostname, u.port or 80, timeout, sleep
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = "Bearer " + key

    def _conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def speculative(self):
        """/health's `speculative` object, or None (not tandem, speculation off, no answer)."""
        c = self._conn()
        try:
            c.request("GET", "/health", headers=self.headers)
            r = c.getresponse()
            body = r.read()
            if r.status not in (200, 503):
                return None
            s = json.loads(body).get("speculative")
        except (OSError, ValueError, AttributeError):
            return None
        finally:
            c.close()
        return s if isinstance(s, dict) and s.get("mode", "off") != "off" else None

    def settled(self):
        """The counters once the last request's steps show on /health (None without them)."""
        last = self.speculative()
        for _ in range(5):
            if last is None:
                return None
            self.sleep(1.2)
            now = self.speculative()
            if now is not None and all(now.get(f) == last.get(f) for f in FIELDS):
                return now
            last = now
        return last

    def complete(self, prompt, max_tokens, extra=None, stream=False):
        """One greedy completion; returns (response JSON or None, tokens, seconds first to last token)."""
        body = {"model": "bench", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": True, "stream": stream, **(extra or {})}
        if stream:
            body["stream_options"] = {"include_usage": True}
        c = self._conn()
        try:
            c.request("POST", "/v1/completions", body=json.dumps(body), headers=self.headers)
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError(f"/v1/completions: HTTP {r.status}: {r.read()[:500]!r}")
            if not stream:
                j = json.loads(r.read())
                return j, j.get("usage", {}).get("completion_tokens", 0), None
            first = last = None
            tokens = 0
            for line in r:
                line = line.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                j = json.loads(line[6:])
                if j.get("usage"):
                    tokens = j["usage"].get("completion_tokens", tokens)
                if j.get("choices") and j["choices"][0].get("text"):
                    last = time.monotonic()
                    first = first or last
            return None, tokens, (last - first) if first else 0.0
        finally:
            c.close()


def prompt_of(tokens, rng):
    """About `tokens` tokens that share no prefix with an earlier prompt (as `tandem bench`'s)."""
    return f"Run {rng.randrange(1 << 31)}:" + " the" * (tokens - 1)


def growth(before, after):
    """The counters' growth between two readings; None for a counter either lacks."""
    return {f: (after[f] - before[f]) if before and after and f in before and f in after else None for f in FIELDS}


def warmup(server, tokens, prompt_tokens, rng):
    j, _, _ = server.complete(prompt_of(prompt_tokens, rng), tokens)
    timings = (j or {}).get("timings", {})
    return {"tokens": (j or {}).get("usage", {}).get("completion_tokens"),
            "draft_n": timings.get("draft_n"), "draft_n_accepted": timings.get("draft_n_accepted"),
            "speculative": server.settled()}


def verify(server, ks, tokens, requests, prompt_tokens, rng, log=sys.stderr):
    points = []
    before = server.settled()
    for k in ks:
        n, seconds = 0, 0.0
        for _ in range(requests):
            _, got, s = server.complete(prompt_of(prompt_tokens, rng), tokens, {"speculative.n_max": k}, stream=True)
            n += got
            seconds += s
        after = server.settled()
        p = {"k": k, "requests": requests, "tokens": n, "decode_s": seconds, **growth(before, after)}
        points.append(p)
        before = after
        step = (p["verify_seconds"] / p["steps"] * 1e3) if p["steps"] and p["verify_seconds"] is not None else None
        print(f"verify: k={k}: {n} tokens, {n / seconds if seconds else 0:.1f} tok/s, {p['steps']} steps"
              + (f", {step:.2f} ms per verify step" if step else ""), file=log, flush=True)
    return {"points": points}


def summary(bench, warm):
    f = bench["figures"]
    line = f"decode {f['decode_tps']['median']:.1f} tok/s"
    if "spec_acceptance_length" in f:
        line += f", acceptance {f['spec_acceptance_length']['median']:.2f}"
    if warm.get("draft_n"):
        line += f", llama-server drafted {warm['draft_n']} and accepted {warm['draft_n_accepted']} in its warm-up"
    return line


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["warmup", "health", "verify", "summary"])
    p.add_argument("url", help="the server (summary: BENCH.json)")
    p.add_argument("warm", nargs="?", help="summary: WARMUP.json")
    p.add_argument("--key", default="")
    p.add_argument("--tokens", type=int, default=None, help="generated tokens per request (warmup 48, verify 128)")
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--k", default="0,1,2,3,4,5,6,7,8", help="verify: the draft bounds, one group of requests each")
    p.add_argument("--requests", type=int, default=2, help="verify: requests per k")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--once", action="store_true", help="health: one reading, not waiting for the counters to settle")
    a = p.parse_args(argv)
    if a.command == "summary":
        with open(a.url) as b, open(a.warm) as w:
            print(summary(json.load(b), json.load(w)))
        return
    server = Server(a.url, a.key)
    rng = random.Random(a.seed)
    if a.command == "warmup":
        r = warmup(server, a.tokens or 48, a.prompt_tokens, rng)
    elif a.command == "health":
        r = server.speculative() if a.once else server.settled()
    else:
        r = verify(server, [int(k) for k in a.k.split(",")], a.tokens or 128, a.requests, a.prompt_tokens, rng)
    print(json.dumps(r))


if __name__ == "__main__":
    sys.exit(main())
