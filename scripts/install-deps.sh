#!/usr/bin/env bash
# Installs the Debian packages that building and testing tandem needs, when any is missing.
# Runs `apt-get update` at most once, and not at all when everything is already there.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache git pkg-config clang-format
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  libssl-dev libsqlite3-dev libsystemd-dev
  libgtest-dev libgmock-dev
  iproute2 procps curl python3
  chromium  # the status page test drives it headless (scripts/install-playwright.sh)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js may come from another packaging that bundles npm (and conflicts with Debian's npm).
command -v npm >/dev/null || missing+=(nodejs npm)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
  command -v sudo >/dev/null || { echo "install-deps: missing packages (${missing[*]}) and not root; install them as root" >&2; exit 1; }
else
  sudo=
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
