#!/usr/bin/env bash
# The set-up scripts' decisions, with fake programs on a PATH of their own (no GPU, network or
# other distribution needed):
#
#   setup_test.sh cuda|deps|node|browser|configure|format
#
# Each case prints "ok: ..." per check and exits 1 at the first that fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
checks=0

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { checks=$((checks + 1)); echo "ok: $*"; }
expect_eq() {  # what got want
  [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
  ok "$1"
}
expect_has() {  # what text needle
  [[ "$2" == *"$3"* ]] || fail "$1: '$3' not in: $2"
  ok "$1"
}
expect_not() {  # what text needle
  [[ "$2" != *"$3"* ]] || fail "$1: '$3' should not be in: $2"
  ok "$1"
}
field() { sed -n "s/^$1=//p" <<<"$2"; }

# A folder of links to the system tools the scripts use, so that PATH can hold fakes and nothing
# else of the system (no real node, npm, nvcc, clang-format).
base_tools() {
  local d=$tmp/sys t
  mkdir -p "$d"
  for t in bash sh env cat sed grep head tail tr sort uniq cut dirname basename readlink mkdir ln mv \
           rm mktemp cp chmod date flock uname sha256sum tar gzip timeout ls id printf test true false \
           touch wc; do
    p=$(command -v "$t") && [ ! -e "$d/$t" ] && ln -s "$p" "$d/$t"
  done
  echo "$d"
}
fake() {  # path, script body
  mkdir -p "$(dirname "$1")"
  printf '#!/bin/bash\n%s\n' "$2" >"$1"
  chmod +x "$1"
}

case_cuda() {
  local sys f out
  sys=$(base_tools)
  f=$tmp/fake
  fake "$f/nvcc" 'echo "Cuda compilation tools, release 13.0, V13.0.48"'
  # nvidia-smi as the driver answers: the compute capabilities in $FAKE_CAPS (one a line), or the
  # failure of a machine without a working driver.
  fake "$f/smi/nvidia-smi" '
[ -n "${FAKE_NO_GPU:-}" ] && { echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."; exit 9; }
case "$*" in
  *compute_cap*) [ -n "${FAKE_OLD_DRIVER:-}" ] && { echo "Field \"compute_cap\" is not a valid field to query."; exit 2; }; printf "%b\n" "$FAKE_CAPS" ;;
  -L) echo "GPU 0: NVIDIA GB10 (UUID: GPU-0000)" ;;
esac'
  run() {  # PATH extra dirs... -- args
    local p=$sys
    while [ "$1" != -- ]; do p="$1:$p"; shift; done
    shift
    env -i PATH="$p" HOME="$tmp" TANDEM_CUDA_DIRS="${DIRS-}" TANDEM_NVIDIA_DEVICE="${DEV:-$tmp/no-such-device}" \
      FAKE_CAPS="${CAPS-}" FAKE_NO_GPU="${NOGPU-}" FAKE_OLD_DRIVER="${OLD-}" \
      bash "$root/scripts/cuda-config.sh" "$@" 2>"$tmp/err"
  }

  out=$(NOGPU=1 run "$f/smi" --)
  expect_eq "no nvcc, a failing nvidia-smi: the CPU" "$(field cuda "$out")" OFF
  out=$(NOGPU=1 run "$f" "$f/smi" --)
  expect_eq "nvcc but no GPU (a CI box with the toolkit): the CPU" "$(field cuda "$out")" OFF
  expect_has "  and it says why" "$(field why "$out")" "no NVIDIA GPU is visible"
  out=$(run "$f" --)
  expect_eq "nvcc and no nvidia-smi at all: the CPU" "$(field cuda "$out")" OFF

  out=$(CAPS=12.1 run "$f" "$f/smi" --)
  expect_eq "GB10 (sm_121) and nvcc: CUDA" "$(field cuda "$out")" ON
  expect_eq "  for 121a-real" "$(field arch "$out")" 121a-real
  expect_eq "  with the nvcc found" "$(field nvcc "$out")" "$f/nvcc"
  out=$(CAPS='9.0\n9.0' run "$f" "$f/smi" --)
  expect_eq "two H100s: 90-real once" "$(field arch "$out")" 90-real
  out=$(CAPS='9.0\n12.1' run "$f" "$f/smi" --)
  expect_eq "an H100 and a GB10-class GPU: both" "$(field arch "$out")" "121a-real,90-real"
  out=$(OLD=1 run "$f" "$f/smi" --)
  expect_eq "a driver without compute_cap: CUDA" "$(field cuda "$out")" ON
  expect_eq "  for native" "$(field arch "$out")" native
  out=$(DEV=$f/nvcc run "$f" --)
  expect_eq "a /dev/nvidia0 without nvidia-smi: CUDA, native" "$(field cuda "$out"),$(field arch "$out")" ON,native

  # DGX OS: nvcc only in /usr/local/cuda/bin, off PATH.
  mkdir -p "$tmp/usr-local-cuda/bin" && cp "$f/nvcc" "$tmp/usr-local-cuda/bin/nvcc"
  out=$(CAPS=12.1 DIRS=$tmp/usr-local-cuda run "$f/smi" --)
  expect_eq "nvcc in /usr/local/cuda/bin only (DGX OS): found" "$(field nvcc "$out")" "$tmp/usr-local-cuda/bin/nvcc"
  expect_eq "  and CUDA for 121a-real" "$(field cuda "$out"),$(field arch "$out")" ON,121a-real

  out=$(CAPS=12.1 run "$f" "$f/smi" -- --cuda OFF)
  expect_eq "TANDEM_CUDA=OFF with a GPU and nvcc: the CPU" "$(field cuda "$out")" OFF
  out=$(NOGPU=1 run "$f" "$f/smi" -- --cuda ON --arch '90;121a-real')
  expect_eq "ON with CMAKE_CUDA_ARCHITECTURES=90;121a-real and no GPU: CUDA" "$(field cuda "$out")" ON
  expect_eq "  for both (',' separated)" "$(field arch "$out")" "90,121a-real"
  out=$(NOGPU=1 run "$f" "$f/smi" -- --arch 90)
  expect_eq "AUTO with an architecture given and no GPU: CUDA" "$(field cuda "$out"),$(field arch "$out")" ON,90
  out=$(NOGPU=1 run "$f/smi" -- --arch 90)
  expect_eq "AUTO with an architecture given but no nvcc: the CPU" "$(field cuda "$out")" OFF
  NOGPU=1 run "$f" "$f/smi" -- --cuda ON >/dev/null && fail "ON without a GPU or architecture should fail"
  expect_has "ON without a GPU or architecture fails, naming CMAKE_CUDA_ARCHITECTURES" "$(cat "$tmp/err")" "CMAKE_CUDA_ARCHITECTURES"
  CAPS=12.1 run "$f/smi" -- --cuda ON >/dev/null && fail "ON without nvcc should fail"
  expect_has "ON without nvcc fails, saying so" "$(cat "$tmp/err")" "no nvcc"
  run "$f" -- --cuda maybe >/dev/null && fail "--cuda maybe should fail"
  ok "--cuda takes only AUTO, ON, OFF"
}

case_deps() {
  local os=$tmp/os-release out test_only p
  list() {  # ID VERSION_ID ID_LIKE -- args
    printf 'ID=%s\nVERSION_ID="%s"\nID_LIKE="%s"\n' "$1" "$2" "$3" >"$os"
    shift 4
    TANDEM_OS_RELEASE=$os bash "$root/scripts/install-deps.sh" --print "$@" 2>"$tmp/err"
  }
  for distro in "debian 12" "ubuntu 24.04"; do
    set -- $distro
    build=$(list "$1" "$2" "" --) || fail "$distro: --print failed: $(cat "$tmp/err")"
    all=$(list "$1" "$2" "" -- --test) || fail "$distro: --print --test failed"
    for p in $build; do grep -qx "$p" <<<"$all" || fail "$distro: $p is in the build set but not in the test set"; done
    ok "$distro: the test set contains the build set"
    test_only=$(comm -13 <(sort <<<"$build") <(sort <<<"$all") | tr '\n' ' ')
    for p in clang-format-14 iproute2; do
      expect_has "$distro: $p is installed for the tests" " $test_only" " $p "
    done
    for p in cmake ninja-build libgtest-dev python3 curl nodejs npm; do
      grep -qx "$p" <<<"$build" || fail "$distro: $p missing from what building and the demo need"
    done
    ok "$distro: building and the demo get the compiler, GoogleTest, python3, curl, Node.js and npm"
    expect_not "$distro: the demo needs no browser" "$build" chromium
    expect_not "$distro: no unversioned clang-format (the format is pinned to 14)" "$(grep -x clang-format <<<"$all")" clang-format
  done
  all=$(list debian 12 "" -- --test)
  grep -qx chromium <<<"$all" || fail "Debian 12: chromium should be installed for the page test"
  ok "Debian 12: chromium for the page test"
  all=$(list ubuntu 24.04 debian -- --test)
  expect_not "Ubuntu 24.04: no chromium (a name provided by the snap-installing chromium-browser)" "$all" chromium
  out=$(list linuxmint 22 "ubuntu debian" -- --test) || fail "an Ubuntu derivative should use Ubuntu's names"
  expect_not "an Ubuntu derivative: Ubuntu's names" "$out" chromium
  expect_has "  with a note that it is not tested" "$(cat "$tmp/err")" "not tested"
  list fedora 41 "" -- >/dev/null && fail "Fedora should be refused"
  expect_has "another system is refused, saying what to do" "$(cat "$tmp/err")" "install the packages"
}

case_node() {
  local sys f arch cache out
  sys=$(base_tools)
  f=$tmp/fake
  # Fake node binaries of a given version: they answer --version and the -e query of the major.
  mknode() {  # path version
    fake "$1" "case \"\$1\" in --version) echo v$2 ;; -e) printf %s ${2%%.*} ;; esac"
  }
  mknode "$f/v18/node" 18.19.1
  mknode "$f/v22/node" 22.12.0
  case "$(uname -m)" in x86_64) arch=x64 ;; *) arch=arm64 ;; esac
  cache=$tmp/cache
  run() {  # PATH dirs... -- 
    local p=$sys
    while [ "$1" != -- ]; do p="$1:$p"; shift; done
    env -i PATH="$p" HOME="$tmp" TANDEM_CACHE="$cache" ${TNODE:+TANDEM_NODE=$TNODE} bash "$root/scripts/node.sh" 2>"$tmp/err"
  }
  out=$(run "$f/v22" --) || fail "a Node.js 22 on PATH: $(cat "$tmp/err")"
  expect_eq "a Node.js 22 on PATH is used" "$out" "$f/v22/node"
  expect_eq "  and linked from the cache's bin/" "$(readlink "$cache/node/bin/node")" "$f/v22/node"
  run "$f/v18" -- >/dev/null && fail "Node.js 18, no cached copy and no npm should fail"
  expect_has "Node.js 18 alone and no npm: fails, saying npm is missing" "$(cat "$tmp/err")" "npm is missing"
  expect_has "  and naming the node it found" "$(cat "$tmp/err")" "v18.19.1"
  # A complete pinned copy in the cache is used without npm.
  local pinned=$cache/node/runtime/node-v24.22.3-linux-$arch
  mknode "$pinned/bin/node" 24.22.3
  date >"$pinned/.tandem-complete"
  out=$(run "$f/v18" --) || fail "Node.js 18 with the pinned copy cached: $(cat "$tmp/err")"
  expect_eq "Node.js 18 on PATH: the cached pinned Node.js 24" "$out" "$pinned/bin/node"
  out=$(run "$cache/node/bin" "$f/v18" --) || fail "with the link dir first on PATH: $(cat "$tmp/err")"
  expect_eq "the cache's own link on PATH is not taken for a system node" "$out" "$pinned/bin/node"
  TNODE=$f/v18/node run "$f/v22" -- >/dev/null && fail "TANDEM_NODE of Node.js 18 should fail"
  expect_has "TANDEM_NODE must be >= 22" "$(cat "$tmp/err")" ">= 22"
  out=$(TNODE=$f/v22/node run "$f/v18" --)
  expect_eq "TANDEM_NODE is used" "$out" "$f/v22/node"
}

case_browser() {
  local f=$tmp/fake out sys
  sys=$(base_tools)
  fake "$f/path/chromium" 'echo "Chromium 120.0.6099.224 built on Debian 12.4, running on Debian 12.4"'
  fake "$f/wrapper/chromium-browser" 'echo "Command '"'"'/usr/bin/chromium-browser'"'"' requires the chromium snap to be installed."; exit 1'
  fake "$f/snap/bin/chromium" 'echo "Chromium 131.0.6778.85 snap"'
  fake "$f/opt/chrome" 'echo "Google Chrome 131.0.6778.85 "'
  run() {  # PATH -- candidates
    env -i PATH="$1:$sys" HOME="$tmp" TANDEM_BROWSER_CANDIDATES="$3" ${TB:+TANDEM_BROWSER=$TB} \
      bash "$root/scripts/find-browser.sh" 2>"$tmp/err"
  }
  out=$(run "$f/path" -- "chromium $f/snap/bin/chromium")
  expect_eq "chromium on PATH first" "$out" "$f/path/chromium"
  out=$(run "$f/wrapper" -- "chromium $f/nothing chromium-browser $f/snap/bin/chromium")
  expect_eq "a snap (Ubuntu) when there is no chromium, before the transitional wrapper" "$out" "$f/snap/bin/chromium"
  out=$(run "$f/wrapper" -- "chromium-browser $f/opt/chrome")
  expect_eq "a wrapper without its snap is passed over for Chrome" "$out" "$f/opt/chrome"
  run "$f/wrapper" -- "chromium chromium-browser $f/nothing" >/dev/null && fail "no browser should fail"
  expect_has "no browser: says so plainly" "$(cat "$tmp/err")" "no Chromium or Chrome on this machine"
  expect_has "  and where it looked" "$(cat "$tmp/err")" "$f/nothing"
  out=$(TB=$f/opt/chrome run "$f/path" -- "chromium")
  expect_eq "TANDEM_BROWSER wins" "$out" "$f/opt/chrome"
  # The page script gives a snap's browser a profile folder the snap can write.
  grep -q "'snap', snap\[1\], 'common'" "$root/tests/integration/status_page.mjs" ||
    fail "status_page.mjs should put a snap browser's profile under ~/snap/<name>/common"
  ok "status_page.mjs gives a snap browser a profile under ~/snap/<name>/common"
}

case_configure() {
  local b=$tmp/build out calls
  # A fake cmake: records its arguments (one a line) and whether a CMakeCache.txt was there.
  fake "$tmp/cmake" '
b=""; prev=""
for a in "$@"; do [ "$prev" = -B ] && b=$a; prev=$a; done
{ echo "call cache=$([ -f "$b/CMakeCache.txt" ] && echo yes || echo no)"; printf "arg %s\n" "$@"; } >>"$FAKE_LOG"
mkdir -p "$b"; touch "$b/build.ninja" "$b/CMakeCache.txt"'
  export FAKE_LOG=$tmp/cmake.log CMAKE=$tmp/cmake
  conf() { : >"$FAKE_LOG"; bash "$root/scripts/configure.sh" "$b" "$@" 2>"$tmp/err"; }
  calls() { grep -c '^call' "$FAKE_LOG"; }
  conf || fail "first configure"
  expect_eq "a new folder is configured" "$(calls)" 1
  expect_has "  with Ninja" "$(cat "$FAKE_LOG")" "arg Ninja"
  conf
  expect_eq "again without flags: not configured again" "$(calls)" 0
  conf -DTANDEM_CUDA=ON
  expect_eq "new CMAKE_FLAGS: configured again" "$(calls)" 1
  expect_has "  from a fresh cache (a flag dropped later is gone too)" "$(cat "$FAKE_LOG")" "call cache=no"
  expect_has "  with the flag" "$(cat "$FAKE_LOG")" "arg -DTANDEM_CUDA=ON"
  conf -DTANDEM_CUDA=ON
  expect_eq "the same flags: not configured again" "$(calls)" 0
  conf
  expect_eq "no flags after flags: the folder keeps its configuration" "$(calls)" 0
  expect_has "  and says so" "$(cat "$tmp/err")" "keeps CMAKE_FLAGS=\"-DTANDEM_CUDA=ON\""
  conf '-DCMAKE_CUDA_ARCHITECTURES=90;121a-real' -DTANDEM_CUDA=ON
  expect_has "a ';' list stays one argument" "$(cat "$FAKE_LOG")" "arg -DCMAKE_CUDA_ARCHITECTURES=90;121a-real"
  conf '-DCMAKE_CUDA_ARCHITECTURES=90;121a-real' -DTANDEM_CUDA=ON
  expect_eq "  and compares equal next time" "$(calls)" 0
  rm "$b/tandem-cmake-flags"
  conf
  expect_eq "a folder configured before flags were recorded is kept without flags" "$(calls)" 0
  rm "$b/CMakeCache.txt"
  conf
  expect_eq "a folder without CMakeCache.txt (a failed configure) is configured" "$(calls)" 1
  unset CMAKE FAKE_LOG
  # The Makefile hands CMAKE_FLAGS and TANDEM_CUDA to configure.sh.
  out=$(cd "$root" && make -n configure BUILD=/x CMAKE_FLAGS=-DFOO=1 TANDEM_CUDA=OFF 2>&1)
  expect_has "make configure passes CMAKE_FLAGS and TANDEM_CUDA" "$out" "scripts/configure.sh /x -DFOO=1 -DTANDEM_CUDA=OFF"
  out=$(cd "$root" && env -u TANDEM_CUDA make -n build BUILD=/x 2>&1)
  expect_has "make build configures through configure.sh" "$out" "scripts/configure.sh /x"
  expect_not "  with no CUDA flag unless asked" "$out" "-DTANDEM_CUDA"
}

case_format() {
  local f=$tmp/fake out
  fake "$f/v18/clang-format" 'echo "Ubuntu clang-format version 18.1.3 (1ubuntu1)"'
  fake "$f/v14/clang-format-14" 'echo "Debian clang-format version 14.0.6"'
  out=$(PATH="$f/v14:$f/v18:$PATH" bash "$root/scripts/format.sh" --which 2>&1) || fail "with clang-format-14: $out"
  expect_eq "clang-format-14 is chosen over a newer clang-format" "$out" "$f/v14/clang-format-14"
  out=$(PATH="$f/v18:$PATH" bash "$root/scripts/format.sh" --which 2>&1) || fail "$out"
  expect_not "a clang-format 18 first on PATH is not used" "$out" "$f/v18"
  TANDEM_CLANG_FORMAT=$f/v18/clang-format bash "$root/scripts/format.sh" --which >/dev/null 2>"$tmp/err" &&
    fail "TANDEM_CLANG_FORMAT of version 18 should be refused"
  expect_has "TANDEM_CLANG_FORMAT of another version is refused, naming it" "$(cat "$tmp/err")" "not clang-format 14"
  grep -q 'scripts/format.sh --check' "$root/tests/format/CMakeLists.txt" || fail "the Format test should run scripts/format.sh"
  ok "the Format test runs scripts/format.sh (the same pinned clang-format as make format)"
}

case "${1:-}" in
  cuda|deps|node|browser|configure|format) "case_$1" ;;
  *) echo "usage: setup_test.sh cuda|deps|node|browser|configure|format" >&2; exit 2 ;;
esac
echo "$checks passed, 0 failed"
