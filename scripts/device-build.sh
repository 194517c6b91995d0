#!/usr/bin/env bash
# On the lent GPU machine (no network): unpacks carry/ (see scripts/device-pack.sh) into /tmp and
# builds tandem and llama.cpp with CUDA for sm_90 into build-cuda/. Extra arguments are targets
# (default: tandem), the test targets among them: the tests are configured as in `make test`
# (googletest from the sysroot), so the GPU tests are the same CMake target CI builds, e.g.
# `scripts/device-build.sh tandem tandem-engine datapath_test` (bench/device-compare.sh build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dev=/tmp/tandem-dev
if [ ! -d "$dev/llama" ]; then
  mkdir -p "$dev"
  tar -C "$dev" -xJf "$root/carry/llama.tar.xz"
  tar -C "$dev" -xJf "$root/carry/sysroot.tar.xz"
fi
sysroot=$dev/sysroot
# libsystemd-dev's libsystemd.so points at libsystemd.so.0, which the sysroot lacks (the runtime
# library is part of the base system there): link against the system's own.
for so in /usr/lib/x86_64-linux-gnu/libsystemd.so.0 /lib/x86_64-linux-gnu/libsystemd.so.0; do
  [ -e "$so" ] && ln -sf "$so" "$sysroot/usr/lib/x86_64-linux-gnu/libsystemd.so" && break
done
export CPATH=$sysroot/usr/include
export LIBRARY_PATH=$sysroot/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TANDEM_CACHE=/tmp/tandem-cache TANDEM_LLAMA_SOURCE=$dev/llama
cmake -S "$root" -B "$root/build-cuda" -G Ninja -DTANDEM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DTANDEM_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$sysroot/usr" \
  -DHTTPLIB_INCLUDE_DIR="$sysroot/usr/include" -DHTTPLIB_LIBRARY="$sysroot/usr/lib/x86_64-linux-gnu/libcpp-httplib.so" \
  -DSQLite3_INCLUDE_DIR="$sysroot/usr/include" -DSQLite3_LIBRARY="$sysroot/usr/lib/x86_64-linux-gnu/libsqlite3.so"
cmake --build "$root/build-cuda" -j "$(nproc)" --target "${@:-tandem}"
