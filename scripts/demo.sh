#!/usr/bin/env bash
# `make demo`: the main job on a small built-in model. Today: write the tiny synthetic model,
# show what it is, and generate from it through libllama, printing the text and the speed.
set -euo pipefail
build=${1:-build}
tandem="$build/tandem"
out="$build/demo"
mkdir -p "$out"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "tandem version"
"$tandem" version

step "write the tiny synthetic MiniMax-M3-shaped model"
"$tandem" synth --preset tiny -o "$out/tiny.gguf"

step "inspect it"
"$tandem" inspect "$out/tiny.gguf"

step "generate 64 tokens through libllama (random weights: the text is noise, the speed is real)"
"$tandem" engine -m "$out/tiny.gguf" -p "The two machines on my desk" -n 64 --ignore-eos
