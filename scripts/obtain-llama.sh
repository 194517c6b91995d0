#!/usr/bin/env bash
# Obtains the pinned llama.cpp source and prints its directory on stdout.
#
# The pin: the git bundle shipped inside the npm package node-llama-cpp@3.22.1, whose tarball is
# verified by sha256 before anything is extracted from it. Everything lands in a cache outside the
# source tree ($TANDEM_CACHE, default ~/.cache/tandem) and is reused once complete.
# TANDEM_LLAMA_SOURCE=DIR skips all of this and uses a checkout the user provides.
set -euo pipefail

readonly NPM_PACKAGE="node-llama-cpp@3.22.1"
readonly TARBALL="node-llama-cpp-3.22.1.tgz"
readonly TARBALL_SHA256="a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f"
readonly LLAMA_COMMIT="de3ff815ea7d559ee917f063901b8986f038abc6"

log() { echo "obtain-llama: $*" >&2; }
die() { echo "obtain-llama: error: $*" >&2; exit 1; }

if [ -n "${TANDEM_LLAMA_SOURCE:-}" ]; then
  [ -f "$TANDEM_LLAMA_SOURCE/include/llama.h" ] ||
    die "TANDEM_LLAMA_SOURCE=$TANDEM_LLAMA_SOURCE does not look like a llama.cpp checkout (no include/llama.h)"
  echo "$(cd "$TANDEM_LLAMA_SOURCE" && pwd)"
  exit 0
fi

cache="${TANDEM_CACHE:-$HOME/.cache/tandem}"
src="$cache/llama.cpp/$LLAMA_COMMIT"
if [ -f "$src/.tandem-complete" ]; then
  echo "$src"
  exit 0
fi

mkdir -p "$cache/npm" "$cache/llama.cpp"
exec 9>"$cache/llama.cpp/.lock"
flock 9
[ -f "$src/.tandem-complete" ] && { echo "$src"; exit 0; }

tarball="$cache/npm/$TARBALL"
have_sha() { [ -f "$tarball" ] && [ "$(sha256sum "$tarball" | cut -d' ' -f1)" = "$TARBALL_SHA256" ]; }
if ! have_sha; then
  command -v npm >/dev/null ||
    die "npm is not installed, and the llama.cpp source is not cached in $src. Install npm (apt-get install npm), or set TANDEM_LLAMA_SOURCE to a llama.cpp checkout of commit $LLAMA_COMMIT."
  rm -f "$tarball"
  log "fetching $NPM_PACKAGE with npm pack into $cache/npm"
  (cd "$cache/npm" && npm pack --silent "$NPM_PACKAGE" >/dev/null) ||
    die "npm pack $NPM_PACKAGE failed (is the npm registry reachable?). Without network, set TANDEM_LLAMA_SOURCE to a llama.cpp checkout of commit $LLAMA_COMMIT."
  [ -f "$tarball" ] || die "npm pack did not produce $tarball"
  have_sha || die "$tarball: sha256 is $(sha256sum "$tarball" | cut -d' ' -f1), expected $TARBALL_SHA256; refusing to use it"
fi

tmp=$(mktemp -d "$cache/llama.cpp/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$tarball" -C "$tmp" package/llama/gitRelease.bundle ||
  die "$tarball has no llama/gitRelease.bundle"
rm -rf "$src"
git clone --quiet --no-checkout "$tmp/package/llama/gitRelease.bundle" "$src" ||
  die "cloning the llama.cpp bundle from $tarball failed"
git -C "$src" -c advice.detachedHead=false checkout --quiet "$LLAMA_COMMIT" ||
  die "the bundle in $tarball does not contain commit $LLAMA_COMMIT"
touch "$src/.tandem-complete"
log "llama.cpp $LLAMA_COMMIT ready in $src"
echo "$src"
