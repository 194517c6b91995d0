#!/usr/bin/env python3
"""The component graph points one way (docs/architecture.md): each component under src/ includes
and links only components of a lower layer. A new component must be given its layer here."""
import os
import re
import sys

root = sys.argv[1]
src = os.path.join(root, "src")

# Lower layers first; a component may use only those of a strictly lower layer.
LAYERS = [
    ["common"],
    ["config", "link", "bench"],
    ["datapath"],
    ["plan"],
    ["synth", "cluster"],
    ["engine", "worker"],
    ["gateway", "ops"],
    ["cli"],
]
layer = {c: i for i, cs in enumerate(LAYERS) for c in cs}

failures = []
components = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
for c in components:
    if c not in layer:
        failures.append("src/%s has no layer in tests/components/components_test.py" % c)
if failures:
    print("\n".join(failures))
    sys.exit(1)

for c in components:
    for dirpath, _, names in os.walk(os.path.join(src, c)):
        for n in names:
            path = os.path.join(dirpath, n)
            rel = os.path.relpath(path, root)
            if n == "CMakeLists.txt":
                text = open(path, encoding="utf-8").read()
                for dep in re.findall(r"\btandem_([a-z_]+)\b", text):
                    target = dep if dep in layer else next((k for k in layer if dep.startswith(k + "_")), None)
                    if target is None or target == c or dep == "component" or dep == "command":
                        continue
                    if layer[target] >= layer[c]:
                        failures.append("%s: %s (layer %d) links tandem_%s (layer %d)" % (rel, c, layer[c], dep, layer[target]))
                continue
            if not n.endswith((".h", ".cpp", ".in")):
                continue
            for line_no, line in enumerate(open(path, encoding="utf-8"), 1):
                m = re.match(r'\s*#include "([a-z_]+)/', line)
                if not m or m.group(1) == c or m.group(1) not in layer:
                    continue
                used = m.group(1)
                if layer[used] >= layer[c]:
                    failures.append("%s:%d: %s (layer %d) includes %s (layer %d)" % (rel, line_no, c, layer[c], used, layer[used]))

# The CLI reaches the engine and the data path through their public interface only.
PUBLIC = {"engine": {"generate.h", "server.h", "llama_log.h", "client.h", "protocol.h", "launch.h"}, "datapath": {"switches.h"}}
for dirpath, _, names in os.walk(os.path.join(src, "cli")):
    for n in names:
        for line_no, line in enumerate(open(os.path.join(dirpath, n), encoding="utf-8"), 1):
            m = re.match(r'\s*#include "(engine|datapath)/([a-z_]+\.h)"', line)
            if m and m.group(2) not in PUBLIC[m.group(1)]:
                failures.append("src/cli/%s:%d: the CLI includes %s/%s, not part of %s's public interface (%s)" %
                                (n, line_no, m.group(1), m.group(2), m.group(1), ", ".join(sorted(PUBLIC[m.group(1)]))))

if failures:
    print("edges that point up or sideways:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("%d components, every edge points down" % len(components))
