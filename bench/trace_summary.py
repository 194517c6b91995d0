#!/usr/bin/env python3
"""Summarises a step trace (TANDEM_STEP_TRACE, src/common/step_trace.h) of one tandem-engine run
and the workers on its machine: one line per run of the head's scheduler (one micro-batch) with
what happened in it, then totals.

  bench/trace_summary.py TRACE...

TRACE files are read together (the head's and a worker's, say); worker graphs outside the head's
runs are left out.

Per run, in milliseconds: when it began (from the first run), how long the head spent in it, the
head's waits for a worker's result (from-workers) and for its own GPU (sync, slot-wait), its time
writing to workers (to-w), when its first launch on a worker returned, the graph then sent
(sent, from the run's start), and each worker graph that began during the run or before the next:
its start relative to the run's and its length. Between `sent` and the worker graph's start lie
the graph's way over, the worker rebuilding it and its queued input writes. Between a worker graph's end and the end of the head's wait for it lies the hand-over
(the result's way back); a worker graph that overlaps the head's previous split shows as a start
before the head's wait began."""
import collections
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    args = sys.argv[1:]
    events = collections.defaultdict(list)
    for path in args:
        for line in open(path):
            parts = line.split()
            if len(parts) not in (4, 5):
                continue
            pid, what, t0, t1 = int(parts[0]), parts[1], int(parts[2]), int(parts[3])
            events[pid].append((t0, t1, what))
    heads = [p for p, ev in events.items() if any(w == "run" for _, _, w in ev)]
    if len(heads) != 1:
        sys.exit(f"expected the runs of one head in {' '.join(args)}, found {len(heads)}")
    head = heads[0]
    graphs = sorted((t0, t1) for p, ev in events.items() if p != head for t0, t1, w in ev if w == "graph")
    runs = sorted((t0, t1) for t0, t1, w in events[head] if w == "run")
    origin = runs[0][0]
    ms = lambda ns: ns / 1e6
    totals = collections.Counter()
    print(f"{'run':>4} {'start':>9} {'in run':>8} {'from-w':>8} {'sync':>7} {'slot-w':>7} {'to-w':>7} {'sent':>7}"
          "  worker graphs (start from run, length)")
    for i, (r0, r1) in enumerate(runs):
        nxt = runs[i + 1][0] if i + 1 < len(runs) else r1
        parts = collections.Counter()
        for t0, t1, w in events[head]:
            if r0 <= t0 < nxt and w in ("from-workers", "sync", "slot-wait", "to-workers"):
                parts[w] += t1 - t0
        launches = sorted(t1 for t0, t1, w in events[head] if r0 <= t0 < r1 and w == "launch-rpc")
        sent = f"{ms(launches[0] - r0):7.1f}" if launches else f"{'-':>7}"
        mine = [(g0, g1) for g0, g1 in graphs if r0 <= g0 < nxt]
        desc = ", ".join(f"{ms(g0 - r0):+.1f} {ms(g1 - g0):.1f}" for g0, g1 in mine)
        print(f"{i:4d} {ms(r0 - origin):9.1f} {ms(r1 - r0):8.1f} {ms(parts['from-workers']):8.1f} "
              f"{ms(parts['sync']):7.1f} {ms(parts['slot-wait']):7.1f} {ms(parts['to-workers']):7.1f} {sent}  {desc}")
        totals["in run"] += r1 - r0
        totals["graphs"] += sum(g1 - g0 for g0, g1 in mine)
        totals.update(parts)
    end = max(t1 for t0, t1, _ in events[head] if t0 < (runs[-1][1]))
    print(f"{len(runs)} runs over {ms(end - origin):.1f} ms: in runs {ms(totals['in run']):.1f}, waiting for workers "
          f"{ms(totals['from-workers']):.1f}, for the head's devices {ms(totals['sync'] + totals['slot-wait']):.1f}; "
          f"worker graphs {ms(totals['graphs']):.1f}")


if __name__ == "__main__":
    main()
