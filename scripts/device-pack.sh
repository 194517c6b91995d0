#!/usr/bin/env bash
# Packs what a build on a machine without network needs (the lent GPU machine: nvcc, CMake and
# ninja, but no package registry) into OUT (default: carry/):
#   llama.tar.xz   the pinned llama.cpp source, without .git, docs and most of models/
#   sysroot.tar.xz headers and libraries of the Debian packages that machine lacks (dpkg -x),
#                  googletest included for the GPU tests bench/device-writes.sh builds there
# scripts/device-build.sh unpacks and builds them there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-carry}" && cd "${1:-carry}" && pwd)
src=$("$here/obtain-llama.sh")
commit=$(git -C "$src" rev-parse HEAD)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/llama"
tar -C "$src" --exclude=.git --exclude=./docs --exclude=./models --exclude=./examples --exclude=./benches \
    --exclude=./tests --exclude=./gguf-py --exclude=./media --exclude=./conversion -cf - . | tar -C "$tmp/llama" -xf -
mkdir -p "$tmp/llama/models/templates" "$tmp/llama/tests" "$tmp/llama/examples"
# Every vocabulary and chat template a `tandem synth` preset names (src/synth/presets.cpp), and the
# spec's default vocabulary (src/synth/model_spec.h), read from the sources rather than listed here.
mapfile -t named < <(grep -ohP '"\K[^"/]+\.(jinja|gguf)(?=")' "$here/../src/synth/presets.cpp" "$here/../src/synth/model_spec.h" | sort -u)
templates=() vocabs=()
for f in "${named[@]}"; do
  case $f in
    *.jinja) templates+=("$src/models/templates/$f") ;;
    *) vocabs+=("$src/models/$f") ;;
  esac
done
[ ${#templates[@]} -gt 0 ] && [ ${#vocabs[@]} -gt 0 ] || { echo "device-pack: no template or vocabulary found in src/synth" >&2; exit 1; }
cp "${vocabs[@]}" "$tmp/llama/models/"
cp "${templates[@]}" "$tmp/llama/models/templates/"
echo "device-pack: $(printf '%s ' "${named[@]}")" >&2
touch "$tmp/llama/tests/CMakeLists.txt" "$tmp/llama/examples/CMakeLists.txt"
echo "$commit" > "$tmp/llama/.tandem-commit"
tar -C "$tmp" -cJf "$out/llama.tar.xz" llama

mkdir -p "$tmp/debs" "$tmp/sysroot"
(cd "$tmp/debs" && apt-get download -q libtomlplusplus-dev libtomlplusplus3 libcpp-httplib-dev libcpp-httplib0.11 \
    libsqlite3-dev libsqlite3-0 libsystemd-dev libcli11-dev libbrotli-dev libgtest-dev >/dev/null)
for d in "$tmp"/debs/*.deb; do dpkg -x "$d" "$tmp/sysroot"; done
tar -C "$tmp" -cJf "$out/sysroot.tar.xz" sysroot
ls -la "$out"
