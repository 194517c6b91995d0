#!/usr/bin/env bash
# Installs the distribution packages tandem needs, when any is missing, on Debian 12 (bookworm)
# and Ubuntu 24.04 (noble, DGX OS included), x86_64 and aarch64.
#
#   install-deps.sh                 what building and `make demo` need (`make deps`)
#   install-deps.sh --test          that, and what only the tests need (`make test-deps`)
#   install-deps.sh --print [--test]  lists those packages for this distribution, one a line,
#                                   and changes nothing
#
# Runs `apt-get update` at most once, and not at all when everything is already there. With
# --test it also makes sure of a Node.js >= 22 for the test harnesses (scripts/node.sh: the
# distribution's Node.js is 18 on both, so it installs a pinned one into the cache).
#
# Environment: TANDEM_SKIP_DEPS=1 checks and installs nothing (a machine set up by hand);
# TANDEM_OS_RELEASE replaces /etc/os-release (tests).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "install-deps: $*" >&2; exit 1; }

test_deps=0 print=0
for a in "$@"; do
  case "$a" in
    --test) test_deps=1 ;;
    --print) print=1 ;;
    *) die "unknown option $a (usage: install-deps.sh [--test] [--print])" ;;
  esac
done
[ "${TANDEM_SKIP_DEPS:-0}" = 1 ] && [ "$print" = 0 ] && exit 0

# Which distribution: its package names differ (below).
os_release=${TANDEM_OS_RELEASE:-/etc/os-release}
ID="" VERSION_ID="" ID_LIKE=""
# shellcheck disable=SC1090
[ -r "$os_release" ] && . "$os_release"
case "$ID:$VERSION_ID" in
  debian:12) distro=debian ;;
  ubuntu:24.04) distro=ubuntu ;;
  *)
    case " $ID $ID_LIKE " in
      *" ubuntu "*) distro=ubuntu ;;
      *" debian "*) distro=debian ;;
      *) die "this is ${ID:-an unknown system} ${VERSION_ID}, not Debian 12 or Ubuntu 24.04: install the packages that scripts/install-deps.sh lists by hand (or set TANDEM_SKIP_DEPS=1 when they are there)" ;;
    esac
    echo "install-deps: note: $ID $VERSION_ID is not tested; using the package names of ${distro^} (Debian 12 / Ubuntu 24.04)" >&2
    ;;
esac

# Building and the demo. The names are the same on both: on Ubuntu the libraries are in universe.
# `make build` compiles the tests too, so GoogleTest is here; python3 runs the build-time check of
# llama.cpp's internals and the demo's port picker; curl is the demo's client; npm fetches the
# pinned llama.cpp (scripts/obtain-llama.sh).
build=(
  build-essential cmake ninja-build ccache git pkg-config ca-certificates
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  libssl-dev libsqlite3-dev libsystemd-dev
  libgtest-dev libgmock-dev
  python3 curl procps
)
# Only the tests: the format check's pinned clang-format (14: Debian 12's own; Ubuntu 24.04 ships
# it beside its default 18, which formats differently), network namespaces for the fault tests,
# and a browser for the status page test. Debian packages Chromium; Ubuntu's `chromium` is only a
# name that `chromium-browser` provides, a transitional package that installs a snap, so nothing is
# installed there and the test drives whatever Chromium or Chrome the machine has
# (scripts/find-browser.sh), or says it has none.
tests=(clang-format-14 iproute2)
[ "$distro" = debian ] && tests+=(chromium)

wanted=("${build[@]}")
[ "$test_deps" = 1 ] && wanted+=("${tests[@]}")
# Node.js: the distribution's, unless a Node.js with npm from elsewhere is already installed (its
# npm conflicts with the distribution's package).
node_pkgs=(nodejs npm)

if [ "$print" = 1 ]; then
  printf '%s\n' "${wanted[@]}" "${node_pkgs[@]}"
  exit 0
fi

command -v dpkg-query >/dev/null && command -v apt-get >/dev/null ||
  die "no dpkg/apt here: install ${wanted[*]} ${node_pkgs[*]} by hand (or set TANDEM_SKIP_DEPS=1)"
missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v npm >/dev/null || missing+=("${node_pkgs[@]}")

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "missing packages (${missing[*]}) and not root; install them as root"
    sudo=sudo
  else
    sudo=
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # A name without a candidate after the update: say which, and where it comes from.
  absent=()
  for p in "${missing[@]}"; do
    apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [0-9]' || absent+=("$p")
  done
  if [ ${#absent[@]} -gt 0 ]; then
    hint=""
    [ "$distro" = ubuntu ] && hint=" (on Ubuntu they are in the universe component: add-apt-repository universe)"
    die "no package ${absent[*]} in the configured archives$hint"
  fi
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$test_deps" = 1 ]; then
  "$here/node.sh" >/dev/null
  "$here/find-browser.sh" >/dev/null 2>&1 ||
    echo "install-deps: note: no Chromium or Chrome on this machine, so the status page test will be skipped ($("$here/find-browser.sh" 2>&1 >/dev/null | tail -n 1))" >&2
fi
exit 0
