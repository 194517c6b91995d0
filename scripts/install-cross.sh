#!/usr/bin/env bash
# Installs what the arm64 cross build (`make build-arm64`, `make test-arm64`) needs on an x86_64
# Debian 12 host, when any of it is missing: the distribution's cross toolchain, qemu-user to run
# the arm64 binaries, and the arm64 (multiarch) -dev packages of the libraries tandem links.
#
#   install-cross.sh            checks, and installs what is missing (root, or sudo)
#   install-cross.sh --print    lists the packages, one a line, and changes nothing
#
# Adds the arm64 architecture to dpkg first (dpkg --add-architecture arm64). On Ubuntu the arm64
# packages come from a different archive than the amd64 ones: add it to the apt sources for arm64
# by hand first (then this script works the same). The header-only libraries (CLI11, nlohmann
# json) are architecture independent, so the host's packages serve both.
#
# Environment: TANDEM_SKIP_DEPS=1 checks and installs nothing (a machine set up by hand).
set -euo pipefail
die() { echo "install-cross: $*" >&2; exit 1; }

print=0
for a in "$@"; do
  case "$a" in
    --print) print=1 ;;
    *) die "unknown option $a (usage: install-cross.sh [--print])" ;;
  esac
done
packages=(
  g++-aarch64-linux-gnu qemu-user
  libtomlplusplus-dev:arm64 libcpp-httplib-dev:arm64 libssl-dev:arm64 libsqlite3-dev:arm64
  libsystemd-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 libgomp1:arm64
  libcli11-dev nlohmann-json3-dev
)
if [ "$print" = 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi
[ "${TANDEM_SKIP_DEPS:-0}" = 1 ] && exit 0
[ "$(uname -m)" = x86_64 ] || die "the cross build is for an x86_64 host (this is $(uname -m): build natively with make build)"

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "missing ${missing[*]}: install them as root"
  sudo=(sudo)
fi
echo "install-cross: installing ${missing[*]}" >&2
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  "${sudo[@]}" dpkg --add-architecture arm64
fi
"${sudo[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
