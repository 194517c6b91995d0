#!/usr/bin/env bash
# Builds the pinned llama.cpp into a cache folder keyed by source, options and compiler, and
# prints that folder on stdout. Unchanged inputs make this a no-op (one ninja call), so a fresh
# clone of tandem reuses the build instead of spending ~15 minutes on it again.
#
#   build-llama.sh SOURCE_DIR [--cuda ON|OFF] [--cuda-arch LIST] [--nvcc PATH] [--build-type TYPE]
#                  [--toolchain FILE [--arm-arch ARCH]] [--configure-only]
#
# --cuda-arch: CMAKE_CUDA_ARCHITECTURES, separated by ',' or ';' (default native); --nvcc: the CUDA
# compiler (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc). scripts/cuda-config.sh chooses
# both for tandem's configure.
#
# --toolchain: a CMake toolchain file for a cross build (cmake/aarch64-linux-gnu.cmake); the CPU
# features are then not probed on this host: ggml is built with GGML_NATIVE off and, with
# --arm-arch, GGML_CPU_ARM_ARCH (-march=ARCH, e.g. armv9-a+i8mm+bf16 for GB10's cores). The cross
# compiler (the file's TANDEM_CROSS_TRIPLE) and the file's contents are part of the cache key; the
# build uses a copy of the file under the cache, so any checkout of the same file shares the build.
#
# --configure-only stops after llama.cpp's CMake configure step (seconds): tandem's own configure
# uses it to learn the build folder, and builds the libraries later, at build time.
#
# Environment: TANDEM_CACHE (default ~/.cache/tandem), TANDEM_JOBS (default: nproc).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "build-llama: error: $*" >&2; exit 1; }

src=${1:?usage: build-llama.sh SOURCE_DIR [--cuda ON|OFF] [--cuda-arch LIST] [--nvcc PATH]}
shift
cuda=OFF cuda_arch=native nvcc="" build_type=Release configure_only=0 toolchain="" arm_arch=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) cuda=$2; shift 2 ;;
    --cuda-arch) cuda_arch=$2; shift 2 ;;
    --nvcc) nvcc=$2; shift 2 ;;
    --build-type) build_type=$2; shift 2 ;;
    --configure-only) configure_only=1; shift ;;
    --toolchain) toolchain=$2; shift 2 ;;
    --arm-arch) arm_arch=$2; shift 2 ;;
    *) die "unknown option $1" ;;
  esac
done
[ -f "$src/include/llama.h" ] || die "$src is not a llama.cpp source tree"
command -v cmake >/dev/null || die "cmake is not installed"
command -v ninja >/dev/null || die "ninja is not installed (apt-get install ninja-build)"

opts=(
  -G Ninja
  -DCMAKE_BUILD_TYPE="$build_type"
  -DBUILD_SHARED_LIBS=ON
  -DGGML_RPC=ON
  -DGGML_RPC_RDMA=OFF
  -DGGML_BACKEND_DL=OFF
  -DLLAMA_BUILD_COMMON=ON
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_OPENSSL=OFF
)
cross_cc=""
if [ -n "$toolchain" ]; then
  [ -f "$toolchain" ] || die "no toolchain file $toolchain"
  # The build folder names the toolchain file it was configured with: a copy under the cache,
  # named by its contents, keeps the key and that folder independent of this checkout's path (a
  # CI clone reuses the cross build; the checkout may go away).
  toolchain_copy="${TANDEM_CACHE:-$HOME/.cache/tandem}/toolchains/$(sha256sum <"$toolchain" | cut -c1-16)-$(basename "$toolchain")"
  mkdir -p "$(dirname "$toolchain_copy")"
  [ -f "$toolchain_copy" ] || { cp "$toolchain" "$toolchain_copy.part" && mv "$toolchain_copy.part" "$toolchain_copy"; }
  toolchain=$toolchain_copy
  triple=$(sed -n 's/^set(TANDEM_CROSS_TRIPLE \([^ )]*\))/\1/p' "$toolchain")
  [ -n "$triple" ] && cross_cc="${triple}-g++ $("${triple}-g++" --version 2>/dev/null | sed -n 1p)"
  opts+=(-DCMAKE_TOOLCHAIN_FILE="$toolchain" -DGGML_NATIVE=OFF)
  [ -n "$arm_arch" ] && opts+=(-DGGML_CPU_ARM_ARCH="$arm_arch")
  [ "$cuda" = ON ] && die "--cuda ON is not supported in a cross build"
else
  [ -n "$arm_arch" ] && die "--arm-arch goes with --toolchain"
  # shellcheck disable=SC2207
  opts+=($("$here/cpu-features.sh"))
fi
if [ "$cuda" = ON ]; then
  if [ -z "$nvcc" ]; then
    nvcc=$(command -v nvcc || true)
    [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  fi
  [ -n "$nvcc" ] && [ -x "$nvcc" ] || die "--cuda ON but no nvcc (give --nvcc PATH)"
  # ',' separates architectures on the command line (CMake would split a ';' list into arguments).
  opts+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${cuda_arch//,/;}" -DCMAKE_CUDA_COMPILER="$nvcc")
else
  opts+=(-DGGML_CUDA=OFF)
fi
targets=(llama llama-common ggml ggml-rpc llama-server ggml-rpc-server llama-bench)

# The key names everything that changes the output: the source's commit (or path when it is not
# a git checkout), the options and the compiler. Bump CACHE_VERSION when this script changes how
# it builds in a way the options do not show.
readonly CACHE_VERSION=1
ident=$(git -C "$src" rev-parse HEAD 2>/dev/null || cat "$src/.tandem-commit" 2>/dev/null || echo "$src")
cc_version=$( (${CC:-cc} --version; ${CXX:-c++} --version) 2>/dev/null | sed -n 1p)
[ -n "$toolchain" ] && cc_version+=" $cross_cc"
[ "$cuda" = ON ] && cc_version+=" $("$nvcc" --version 2>/dev/null | tail -1)"
key=$(printf '%s\n' "$ident" "${opts[*]}" "$cc_version" "$CACHE_VERSION" | sha256sum | cut -c1-16)
cache="${TANDEM_CACHE:-$HOME/.cache/tandem}"
build="$cache/build/llama-${ident:0:12}-$key"
mkdir -p "$build"
# Paths under the cache are hashed relative to it, so ccache also serves a rebuild in another folder.
export CCACHE_BASEDIR="$cache"
# A configured folder is all --configure-only needs: it does not wait for a build in progress.
if [ "$configure_only" = 1 ] && [ -f "$build/build.ninja" ]; then
  echo "$build"
  exit 0
fi
exec 9>"$build/.lock"
flock 9

if [ ! -f "$build/build.ninja" ]; then
  echo "build-llama: configuring llama.cpp in $build" >&2
  cmake -S "$src" -B "$build" "${opts[@]}" >"$build/configure.log" 2>&1 ||
    { tail -30 "$build/configure.log" >&2; rm -f "$build/build.ninja"; die "configuring llama.cpp failed; full log in $build/configure.log"; }
fi
if [ "$configure_only" = 1 ]; then
  echo "$build"
  exit 0
fi
jobs=${TANDEM_JOBS:-$(nproc)}
# The full ninja log goes to build.log; the terminal gets a progress line per tenth of a real
# build (a first build takes ~10-20 minutes on two cores) and nothing for a no-op.
if ! ninja -C "$build" -j "$jobs" "${targets[@]}" 2>&1 | tee "$build/build.log" | awk '
    /^\[[0-9]+\/[0-9]+\]/ {
      split(substr($1, 2), a, "/"); n = a[1] + 0; t = a[2] + 0
      if (t < 20) next
      if (!started) { printf "build-llama: building llama.cpp in %s (%d steps, log in build.log)\n", dir, t > "/dev/stderr"; started = 1 }
      tenth = int(n * 10 / t)
      if (tenth != last) { last = tenth; printf "build-llama: %d/%d steps (%d%%)\n", n, t, n * 100 / t > "/dev/stderr" }
    }' dir="$build"; then
  tail -40 "$build/build.log" >&2
  die "building llama.cpp failed; full log in $build/build.log"
fi
printf '%s\n' "${opts[*]}" >"$build/tandem-options.txt"
echo "$build"
