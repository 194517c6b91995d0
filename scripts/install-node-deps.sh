#!/usr/bin/env bash
# Installs the official client SDKs, pinned: `openai` and `@anthropic-ai/sdk`, for
# tests/integration/openai_client.mjs and anthropic_client.mjs.
#
# They go into a cache folder outside the source tree,
#   ${TANDEM_CACHE:-$HOME/.cache/tandem}/node/openai-<version>-anthropic-<version>/node_modules
# and are reused when a previous install completed. Prints that node_modules path on stdout (and
# nothing else there), so a caller can write:
#   TANDEM_NODE_MODULES=$(scripts/install-node-deps.sh) "$(scripts/node.sh)" tests/integration/openai_client.mjs ...
#
# Environment: TANDEM_CACHE (cache root), TANDEM_OPENAI_VERSION and TANDEM_ANTHROPIC_VERSION
# (override the pinned versions).
set -euo pipefail

# openai 7.x: no dependencies of its own, CommonJS and ESM builds, Node.js >= 22.
OPENAI_VERSION="${TANDEM_OPENAI_VERSION:-7.60.0}"
# @anthropic-ai/sdk 1.x: a few small dependencies, CommonJS and ESM builds, Node.js >= 18.
ANTHROPIC_VERSION="${TANDEM_ANTHROPIC_VERSION:-1.16.0}"

die() { echo "install-node-deps: $*" >&2; exit 1; }

# The Node.js the harnesses run on (>= 22; scripts/node.sh installs a pinned one when the system's
# is older). npm itself may be the distribution's, on its own Node.js: it only unpacks packages.
node=$("$(dirname "$0")/node.sh") || die "no Node.js >= 22 (scripts/node.sh says why above)"
node() { "$node" "$@"; }
command -v npm >/dev/null || die "npm is not installed (scripts/install-deps.sh installs it)"

cache_root="${TANDEM_CACHE:-$HOME/.cache/tandem}"
base="$cache_root/node"
dest="$base/openai-$OPENAI_VERSION-anthropic-$ANTHROPIC_VERSION"
modules="$dest/node_modules"
marker="$dest/.tandem-complete"

# Complete means: the marker that is written last, and the package with the right version.
installed_version() {  # node_modules package
  node -e 'try { process.stdout.write(require(process.argv[1]).version) } catch (e) {}' \
    "$1/$2/package.json" 2>/dev/null || true
}
is_complete() {
  [ -f "$marker" ] && [ "$(installed_version "$modules" openai)" = "$OPENAI_VERSION" ] &&
    [ "$(installed_version "$modules" @anthropic-ai/sdk)" = "$ANTHROPIC_VERSION" ]
}

if is_complete; then
  echo "$modules"
  exit 0
fi

mkdir -p "$base"
# One installer at a time per cache; a second one waits, then finds the first one's result.
if command -v flock >/dev/null; then
  exec 9>"$base/.lock"
  flock -w 600 9 || die "timed out waiting for another install ($base/.lock)"
  if is_complete; then
    echo "$modules"
    exit 0
  fi
fi

staging=$(mktemp -d "$base/.clients-$OPENAI_VERSION-$ANTHROPIC_VERSION.XXXXXX")
log="$staging.log"
cleanup() { rm -rf "$staging"; rm -f "$log"; }
trap cleanup EXIT

printf '{ "name": "tandem-node-deps", "private": true }\n' >"$staging/package.json"
pkgs="openai@$OPENAI_VERSION @anthropic-ai/sdk@$ANTHROPIC_VERSION"
echo "install-node-deps: installing $pkgs into $dest" >&2
# --ignore-scripts: nothing from the package runs at install time. --prefer-offline: npm's own
# cache serves the tarball when it has it. Short fetch timeouts so an unreachable registry fails
# within about a minute instead of hanging.
npm_rc=0
timeout 600 npm install --prefix "$staging" --no-audit --no-fund --no-package-lock --ignore-scripts \
  --prefer-offline --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 \
  --fetch-timeout=30000 --loglevel=error --engine-strict=false "openai@$OPENAI_VERSION" \
  "@anthropic-ai/sdk@$ANTHROPIC_VERSION" >"$log" 2>&1 || npm_rc=$?
if [ "$npm_rc" -ne 0 ]; then
  tail -n 20 "$log" >&2
  registry=$(npm config get registry 2>/dev/null || echo '?')
  if [ "$npm_rc" -eq 124 ]; then
    die "npm install $pkgs timed out after 600 s (registry: $registry)"
  elif grep -Eq 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|network|socket hang up' "$log"; then
    die "the npm registry is unreachable ($registry): cannot download $pkgs; connect to the network, set a reachable registry or proxy in npm's config, or fill $modules on another machine"
  elif grep -Eq 'E404|ETARGET|No matching version' "$log"; then
    die "$pkgs: a version is not in the npm registry ($registry)"
  else
    die "npm install $pkgs failed (exit $npm_rc, registry: $registry); npm's output is above"
  fi
fi

for want in "openai $OPENAI_VERSION" "@anthropic-ai/sdk $ANTHROPIC_VERSION"; do
  set -- $want
  got=$(installed_version "$staging/node_modules" "$1")
  [ "$got" = "$2" ] || die "npm finished but $staging/node_modules/$1 has version '${got:-none}', not $2"
  # The package must load in this Node.js, both as CommonJS and as ESM.
  node -e 'require(process.argv[1])' "$staging/node_modules/$1" >&2 ||
    die "$1@$2 does not load (require) in Node.js $(node --version)"
  node --input-type=module -e 'await import(process.argv[1])' "file://$staging/node_modules/$1/index.mjs" >&2 ||
    die "$1@$2 does not load (import) in Node.js $(node --version)"
done

rm -rf "$dest"
mv "$staging" "$dest"
date -u +%Y-%m-%dT%H:%M:%SZ >"$marker"
echo "install-node-deps: $pkgs ready" >&2
echo "$modules"
