#!/usr/bin/env bash
# ThreadSanitizer run of the multi-threaded test suites on this host (`make tsan`): x86's strong
# memory order hides races that ARM (GB10) shows, TSan finds them on either.
#
#   tsan.sh [BUILD_DIR] [--build-only]     (default BUILD_DIR: build-tsan)
#
# Configures BUILD_DIR with -fsanitize=thread (GCC; tandem's code only: the cached llama.cpp
# libraries are the ordinary ones, whose own threads TSan does not see into), builds the suites
# below (and tandem, which some cases start: it is instrumented too, and its reports land in the same
# folder) and runs each once. A report fails the run.
# Environment: JOBS (default 2), TSAN_FILTER (replaces each suite's gtest filter).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=build-tsan build_only=0
for a in "$@"; do
  case "$a" in
    --build-only) build_only=1 ;;
    *) build=$a ;;
  esac
done
case "$build" in /*) ;; *) build=$root/$build ;; esac

# suite binary (path under BUILD_DIR) and its gtest filter: the suites that run threads: the engine's
# scheduler and server, the gateway's HTTP server and supervisor, the link's sockets and splices,
# the worker's forwarder and loader.
suites=(
  "tests/engine/engine_test:*"
  "tests/gateway/gateway_test:*"
  "tests/link/link_test:*"
  "tests/worker/worker_test:*"
)

flags="-fsanitize=thread -g -O1 -fno-omit-frame-pointer"
"$root/scripts/configure.sh" "$build" -DTANDEM_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  -DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=thread
targets=(tandem)
for s in "${suites[@]}"; do targets+=("$(basename "${s%%:*}")"); done
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}"
[ "$build_only" = 1 ] && exit 0

fail=0
mkdir -p "$build/tsan"
for s in "${suites[@]}"; do
  bin=${s%%:*} filter=${TSAN_FILTER:-${s#*:}}
  name=$(basename "$bin")
  log=$build/tsan/$name.log
  start=$(date +%s)
  # halt_on_error=0: every race of the suite in one run; second_deadlock_stack for lock orders;
  # ignore_noninstrumented_modules: llama.cpp is not instrumented, so the synchronisation inside it
  # (ggml-rpc's futures, ggml-cpu's thread pool) is invisible and every access around it a report.
  if (cd "$build" && TSAN_OPTIONS="halt_on_error=0 ignore_noninstrumented_modules=1 second_deadlock_stack=1 history_size=4 log_path=$build/tsan/$name.tsan" \
        "$build/$bin" --gtest_filter="$filter" >"$log" 2>&1); then rc=0; else rc=$?; fi
  reports=$(cat "$build/tsan/$name.tsan".* 2>/dev/null | grep -c "WARNING: ThreadSanitizer" || true)
  echo "tsan: $name: exit $rc, $reports TSan reports, $(( $(date +%s) - start )) s ($(grep -E '^\[  (PASSED|FAILED)  \]' "$log" | tr '\n' ' '))"
  if [ "$rc" != 0 ] || [ "$reports" != 0 ]; then fail=1; fi
done
[ "$fail" = 0 ] || { echo "tsan: reports in $build/tsan/*.tsan.*, test output in $build/tsan/*.log" >&2; exit 1; }
