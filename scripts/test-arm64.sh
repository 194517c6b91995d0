#!/usr/bin/env bash
# `make test-arm64`: the in-process test suites of the arm64 cross build, run under qemu-aarch64.
#
#   test-arm64.sh BUILD_DIR [--list]
#
# BUILD_DIR was configured by `make build-arm64` (cmake/aarch64-linux-gnu.cmake); this builds the
# suites below in it and runs each once under qemu-user, with the CPU GB10's cores have (SVE2 at
# 128 bits, i8mm, bf16, dotprod). --list prints what runs here and what stays on x86, and why.
#
# What cannot run here: qemu-user runs one arm64 program, and without binfmt_misc that program
# cannot start another arm64 program (execve of an arm64 binary fails with ENOEXEC). So the cases
# that start `tandem`, `tandem-engine`, llama-server or ggml-rpc-server (the multi-process tests)
# are x86-only: `make test` runs them. Host programs (sh, python3) start as usual.
# Environment: JOBS (build jobs, default 2), ARM64_FILTER (one gtest filter for every suite),
# ARM64_TIMEOUT (seconds per suite, default 900: a suite past it is stopped and counts as failed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: test-arm64.sh BUILD_DIR [--list]}
list=0
[ "${2:-}" = --list ] && list=1
case "$build" in /*) ;; *) build=$root/$build ;; esac

# suite (binary under tests/, the longest first) | gtest filter | why the cases the filter leaves out are x86-only
suites=(
  "engine/engine_test|*-EngineServer.*:SchedulerSplit.*:Generate.SplitAcrossRpcServers*:ChatTemplateTest.AMultiTurnConversationWithToolsRendersAsLlamaServerRendersIt:ChatTemplateTest.AGeneratedToolCallIsParsedBack:ChatTemplateMidSystem.*|engine server cases start tandem-engine; split and template cases start ggml-rpc-server or llama-server"
  "synth/synth_test|*-DraftSpeculation.Eagle3OnAMiniMaxM3TargetAbortsInThePin|the death case re-executes the test binary"
  "common/common_test|*|"
  "config/config_test|*|"
  "cluster/cluster_test|*|"
  "plan/plan_test|*-PlanM3.*:ShippedExample.*:PlanCli.*|the plan CLI cases run tandem plan"
  "link/link_test|*|"
  "datapath/datapath_test|*-RpcWrites.ATandemWorkerGetsARepeatedInputOnceAndCopiesItForTheOtherViews:RpcWrites.AMaskReachesATandemWorkerAsRunsBitForBitAndNoiseGoesAsItIs|these cases start tandem's RPC child"
  "datapath/datapath_switches_test|*|"
  "fuzz/fuzz_replay_test|*|"
  "gateway/gateway_test|*-ApiServerListenTest.ABurstOfNewConnectionsIsAnsweredEvenWhileTheServerCannotAccept|the burst case starts tandem"
  "worker/worker_test|*-Worker.*:Forwarder.*:HostilePeer.*|these cases start a tandem worker (and through it tandem's RPC child or ggml-rpc-server)"
  "ops/ops_test|*-SystemdUnits.SystemdAnalyzeVerifyAcceptsBoth:SystemdUnits.DeployExamplesAreWhatTheCommandPrints|both run the arm64 tandem"
)
x86_only=(
  "cli/cli_test: runs the tandem binary"
  "worker/worker_load_test: starts tandem workers and engines"
  "plan/plan_accuracy_test: starts tandem-engine"
  "integration/integration_test: whole clusters (tandem serve, workers, llama-server, agents)"
  "faults/faults_test, load/load_test: clusters of tandem processes"
  "Python, shell and format tests (Bench, Components, Docs, Format, Setup, LlamaInternals): host tools"
)
if [ "$list" = 1 ]; then
  echo "Under qemu-aarch64 (make test-arm64):"
  for s in "${suites[@]}"; do
    IFS='|' read -r bin filter why <<<"$s"
    echo "  $bin  --gtest_filter='$filter'${why:+  (left out: $why)}"
  done
  echo "x86 only (make test):"
  printf '  %s\n' "${x86_only[@]}"
  exit 0
fi

[ -f "$build/CMakeCache.txt" ] || { echo "test-arm64: $build is not configured (make build-arm64)" >&2; exit 1; }
command -v qemu-aarch64 >/dev/null || { echo "test-arm64: no qemu-aarch64 (scripts/install-cross.sh)" >&2; exit 1; }
targets=()
for s in "${suites[@]}"; do targets+=("$(basename "${s%%|*}")"); done
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}"

# As in cmake/aarch64-linux-gnu.cmake's CMAKE_CROSSCOMPILING_EMULATOR.
qemu=(qemu-aarch64 -cpu "max,sve-default-vector-length=16")
# The arm64 llama.cpp libraries (also in the binaries' RPATH): the cache folder build.ninja names.
llama_dir=$(grep -oE '[^ ;"$]*/build/llama-[0-9a-f]{12}-[0-9a-f]{16}' "$build/build.ninja" | head -1 || true)
export LD_LIBRARY_PATH=${llama_dir:+$llama_dir/bin:}/usr/lib/aarch64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$build/test-arm64" "$build/test-tmp"
rm -f "$build/test-arm64/"*.result

# Runs one suite under qemu; its line of figures goes to NAME.result.
run_suite() {
  local bin=$1 filter=$2 name log start rc passed failed
  name=$(basename "$bin")
  log=$build/test-arm64/$name.log
  start=$(date +%s)
  if (cd "$build" && timeout "${ARM64_TIMEOUT:-900}" "${qemu[@]}" "$build/tests/$bin" --gtest_filter="${ARM64_FILTER:-$filter}" >"$log" 2>&1); then rc=0; else rc=$?; fi
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\?, listed below.*/\1/p' "$log" | tail -1)
  echo "$name ${passed:-0} ${failed:-0} $(( $(date +%s) - start )) $rc" >"$build/test-arm64/$name.result"
}

# JOBS suites side by side (most keep about one core busy under qemu), the longest first, so the
# run takes about as long as engine_test alone.
all_start=$(date +%s)
running=0
for s in "${suites[@]}"; do
  IFS='|' read -r bin filter why <<<"$s"
  if [ "$running" -ge "${JOBS:-2}" ]; then wait -n || true; running=$((running - 1)); fi
  run_suite "$bin" "$filter" &
  running=$((running + 1))
done
wait || true

fail=0 total_pass=0 total_fail=0
for s in "${suites[@]}"; do
  name=$(basename "${s%%|*}")
  read -r _ passed failed secs rc <"$build/test-arm64/$name.result" || { passed=0 failed=0 secs=0 rc=missing; }
  total_pass=$((total_pass + passed)) total_fail=$((total_fail + failed))
  printf 'test-arm64: %-26s %4d passed %3d failed  %4d s%s\n' "$name" "$passed" "$failed" "$secs" \
    "$([ "$rc" = 0 ] || echo "  (exit $rc, log $build/test-arm64/$name.log)")"
  [ "$rc" = 0 ] || fail=1
done
echo "test-arm64: $total_pass passed, $total_fail failed in $(( $(date +%s) - all_start )) s" \
  "(x86-only suites: scripts/test-arm64.sh $build --list)"
exit "$fail"
