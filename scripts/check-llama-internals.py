#!/usr/bin/env python3
"""Checks every llama.cpp internal tandem relies on against a llama.cpp source tree.

tandem's split data path depends on things llama.cpp does not promise: ggml-rpc's private command
numbers, a private C++ symbol's signature, the names ggml gives RPC devices, the layout of a
SET_TENSOR message, a condition in libllama that keeps pipeline parallelism on. Each reliance is
annotated where tandem's source relies on it, on the line before the declaration:

  // pinned llama.cpp: enum  FILE ENUM MEMBER   the next line's `= N` is MEMBER's value in `enum ENUM`
  // pinned llama.cpp: value FILE NAME          the next line's `= EXPR` equals `NAME = EXPR` in FILE
  // pinned llama.cpp: text  FILE LITERAL...    FILE contains LITERAL (whitespace collapsed)

FILE is relative to the llama.cpp source root. The build runs this against the pinned source and
stops on any mismatch, naming the reliance, so that a llama.cpp upgrade that moves one fails loudly
instead of making the split compute on wrong bytes.

usage: check-llama-internals.py LLAMA_SOURCE_DIR TANDEM_SRC_DIR [STAMP]
"""
import os
import re
import sys

ANNOTATION = re.compile(r"//\s*pinned llama\.cpp:\s*(enum|value|text)\s+(\S+)\s+(.*\S)\s*$")


def collapse(s):
    return " ".join(s.split())


def number(expr):
    expr = re.sub(r"(?<=[0-9a-fA-F])(ULL|ull|UL|ul|LL|ll|U|u)\b", "", expr.strip())
    if not re.fullmatch(r"[0-9xXa-fA-F\s*+\-<>()]+", expr):
        raise ValueError("not a constant expression: " + expr)
    return eval(expr, {"__builtins__": {}})  # digits and operators only, checked above


def enum_value(text, enum, member):
    m = re.search(r"enum\s+" + re.escape(enum) + r"\s*\{(.*?)\}", text, re.S)
    if not m:
        return None, "no `enum " + enum + "`"
    value = -1
    for entry in re.sub(r"//[^\n]*", "", m.group(1)).split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, _, init = entry.partition("=")
        value = number(init) if init.strip() else value + 1
        if name.strip() == member:
            return value, None
    return None, "no member " + member + " in `enum " + enum + "`"


def our_value(line):
    m = re.search(r"=\s*([^;{]+)[;{]", line)
    if not m:
        raise ValueError("the line after the annotation has no `= VALUE;`: " + line.strip())
    return number(m.group(1))


def check(llama, where, kind, path, args, next_line, cache):
    full = os.path.join(llama, path)
    if full not in cache:
        try:
            with open(full, encoding="utf-8", errors="replace") as f:
                cache[full] = f.read()
        except OSError as e:
            return "cannot read " + path + ": " + e.strerror
    text = cache[full]
    if kind == "text":
        return None if collapse(args) in collapse(text) else path + " no longer contains `" + args + "`"
    if kind == "enum":
        enum, member = args.split()
        theirs, why = enum_value(text, enum, member)
        if why:
            return path + ": " + why
    else:
        m = re.search(r"\b" + re.escape(args) + r"\s*=\s*([^;,]+)[;,]", text)
        if not m:
            return path + " no longer defines " + args
        theirs = number(m.group(1))
    ours = our_value(next_line)
    return None if ours == theirs else "%s: %s is %s there, tandem has %s" % (path, args, theirs, ours)


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    llama, src = argv[1], argv[2]
    failures, checked, cache = [], 0, {}
    for root, _, files in sorted(os.walk(src)):
        for name in sorted(files):
            if not name.endswith((".h", ".cpp")):
                continue
            file = os.path.join(root, name)
            with open(file, encoding="utf-8") as f:
                lines = f.read().splitlines()
            for i, line in enumerate(lines):
                m = ANNOTATION.search(line)
                if not m:
                    continue
                where = "%s:%d" % (os.path.relpath(file, os.path.dirname(src)), i + 1)
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                try:
                    why = check(llama, where, m.group(1), m.group(2), m.group(3), nxt, cache)
                except ValueError as e:
                    why = str(e)
                checked += 1
                if why:
                    failures.append(where + ": " + why)
    if failures:
        sys.stderr.write("tandem relies on llama.cpp internals that differ in %s:\n" % llama)
        for f in failures:
            sys.stderr.write("  " + f + "\n")
        sys.stderr.write("This llama.cpp is not the one tandem is pinned to, or the pin moved without updating "
                         "these. Build against the pinned release (cmake/llama.cmake), or port each reliance above "
                         "and its annotation together.\n")
        return 1
    if checked == 0:
        sys.stderr.write("no `pinned llama.cpp:` annotations found under " + src + "\n")
        return 1
    if len(argv) > 3:
        with open(argv[3], "w") as f:
            f.write("%d llama.cpp internals checked\n" % checked)
    print("%d llama.cpp internals match %s" % (checked, llama))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
