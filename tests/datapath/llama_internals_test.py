#!/usr/bin/env python3
"""The build-time guard (scripts/check-llama-internals.py) against a copy of the pinned sources it
reads: it passes as they are, and fails, naming the reliance, on each simulated upgrade."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

root, llama = sys.argv[1], sys.argv[2]
script = os.path.join(root, "scripts", "check-llama-internals.py")
src = os.path.join(root, "src")

# The files the annotations name.
files = set()
for dirpath, _, names in os.walk(src):
    for n in names:
        if n.endswith((".h", ".cpp")):
            for line in open(os.path.join(dirpath, n), encoding="utf-8"):
                m = re.search(r"//\s*pinned llama\.cpp:\s*\w+\s+(\S+)", line)
                if m:
                    files.add(m.group(1))
assert len(files) >= 5, files


def run(tree):
    return subprocess.run([sys.executable, script, tree, src], capture_output=True, text=True)


failures = []
with tempfile.TemporaryDirectory() as tmp:
    def fresh():
        tree = os.path.join(tmp, "llama")
        shutil.rmtree(tree, ignore_errors=True)
        for f in files:
            os.makedirs(os.path.dirname(os.path.join(tree, f)), exist_ok=True)
            shutil.copy(os.path.join(llama, f), os.path.join(tree, f))
        return tree

    r = run(fresh())
    if r.returncode != 0:
        failures.append("the pinned sources fail the guard:\n" + r.stderr)

    rpc = "ggml/src/ggml-rpc/ggml-rpc.cpp"
    upgrades = [
        ("a command inserted before SET_TENSOR", rpc, "    RPC_CMD_SET_TENSOR,", "    RPC_CMD_NEW_THING,\n    RPC_CMD_SET_TENSOR,",
         "RPC_CMD_SET_TENSOR is 7 there, tandem has 6"),
        ("the hash threshold raised", rpc, "HASH_THRESHOLD = 10 * 1024 * 1024", "HASH_THRESHOLD = 20 * 1024 * 1024",
         "HASH_THRESHOLD is 20971520 there, tandem has 10485760"),
        ("RPC buffer types renamed", rpc, '"RPC" + std::to_string(device) + "["', '"rpc-" + std::to_string(device) + "["',
         "no longer contains `std::string buft_name"),
        ("the private tensor map changed", "src/llama-model.h", "llama_internal_get_tensor_map(const llama_model * model)",
         "llama_internal_get_tensor_map(const llama_model & model)", "llama_internal_get_tensor_map"),
        ("the pipeline condition changed", "src/llama-context.cpp", "!model.has_tensor_overrides()",
         "!model.has_tensor_overrides(true)", "has_tensor_overrides"),
    ]
    for what, f, old, new, expect in upgrades:
        tree = fresh()
        path = os.path.join(tree, f)
        text = open(path, encoding="utf-8").read()
        if old not in text:
            failures.append(what + ": the pinned " + f + " has no `" + old + "` to change (update this test)")
            continue
        open(path, "w", encoding="utf-8").write(text.replace(old, new, 1))
        r = run(tree)
        if r.returncode == 0:
            failures.append(what + ": the guard passed")
        elif expect not in r.stderr or "differ in" not in r.stderr:
            failures.append(what + ": the guard failed without saying `" + expect + "`:\n" + r.stderr)

    tree = fresh()
    os.remove(os.path.join(tree, rpc))
    r = run(tree)
    if r.returncode == 0 or "cannot read " + rpc not in r.stderr:
        failures.append("a missing file: " + r.stderr)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("the guard passes on the pinned sources and fails on %d simulated upgrades" % 6)
