#!/usr/bin/env bash
# Installs the official `openai` npm package, pinned, for tests/integration/openai_client.mjs.
#
# It goes into a cache folder outside the source tree,
#   ${TANDEM_CACHE:-$HOME/.cache/tandem}/node/openai-<version>/node_modules
# and is reused when a previous install completed. Prints that node_modules path on stdout (and
# nothing else there), so a caller can write:
#   TANDEM_NODE_MODULES=$(scripts/install-node-deps.sh) node tests/integration/openai_client.mjs ...
#
# Environment: TANDEM_CACHE (cache root), TANDEM_OPENAI_VERSION (override the pinned version).
set -euo pipefail

# openai 5.x: no dependencies of its own, CommonJS and ESM builds, needs Node.js >= 18 (fetch).
OPENAI_VERSION="${TANDEM_OPENAI_VERSION:-5.23.2}"
NODE_MIN_MAJOR=18

die() { echo "install-node-deps: $*" >&2; exit 1; }

command -v node >/dev/null || die "node is not installed (Node.js >= $NODE_MIN_MAJOR is needed; scripts/install-deps.sh installs it)"
command -v npm >/dev/null || die "npm is not installed (scripts/install-deps.sh installs it)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge "$NODE_MIN_MAJOR" ] ||
  die "Node.js $(node --version) is too old: openai $OPENAI_VERSION needs Node.js >= $NODE_MIN_MAJOR"

cache_root="${TANDEM_CACHE:-$HOME/.cache/tandem}"
base="$cache_root/node"
dest="$base/openai-$OPENAI_VERSION"
modules="$dest/node_modules"
marker="$dest/.tandem-complete"

# Complete means: the marker that is written last, and the package with the right version.
installed_version() {
  node -e 'try { process.stdout.write(require(process.argv[1]).version) } catch (e) {}' \
    "$1/openai/package.json" 2>/dev/null || true
}
is_complete() {
  [ -f "$marker" ] && [ "$(installed_version "$modules")" = "$OPENAI_VERSION" ]
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

staging=$(mktemp -d "$base/.openai-$OPENAI_VERSION.XXXXXX")
log="$staging.log"
cleanup() { rm -rf "$staging"; rm -f "$log"; }
trap cleanup EXIT

printf '{ "name": "tandem-node-deps", "private": true }\n' >"$staging/package.json"
echo "install-node-deps: installing openai@$OPENAI_VERSION into $dest" >&2
# --ignore-scripts: nothing from the package runs at install time. --prefer-offline: npm's own
# cache serves the tarball when it has it. Short fetch timeouts so an unreachable registry fails
# within about a minute instead of hanging.
npm_rc=0
timeout 600 npm install --prefix "$staging" --no-audit --no-fund --no-package-lock --ignore-scripts \
  --prefer-offline --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 \
  --fetch-timeout=30000 --loglevel=error "openai@$OPENAI_VERSION" >"$log" 2>&1 || npm_rc=$?
if [ "$npm_rc" -ne 0 ]; then
  tail -n 20 "$log" >&2
  registry=$(npm config get registry 2>/dev/null || echo '?')
  if [ "$npm_rc" -eq 124 ]; then
    die "npm install openai@$OPENAI_VERSION timed out after 600 s (registry: $registry)"
  elif grep -Eq 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|network|socket hang up' "$log"; then
    die "the npm registry is unreachable ($registry): cannot download openai@$OPENAI_VERSION; connect to the network, set a reachable registry or proxy in npm's config, or fill $modules on another machine"
  elif grep -Eq 'E404|ETARGET|No matching version' "$log"; then
    die "openai@$OPENAI_VERSION is not in the npm registry ($registry)"
  else
    die "npm install openai@$OPENAI_VERSION failed (exit $npm_rc, registry: $registry); npm's output is above"
  fi
fi

got=$(installed_version "$staging/node_modules")
[ "$got" = "$OPENAI_VERSION" ] ||
  die "npm finished but $staging/node_modules/openai has version '${got:-none}', not $OPENAI_VERSION"
# The package must load in this Node.js, both as CommonJS and as ESM.
node -e 'require(process.argv[1])' "$staging/node_modules/openai" >&2 ||
  die "openai@$OPENAI_VERSION does not load (require) in Node.js $(node --version)"
node --input-type=module -e 'await import(process.argv[1])' \
  "file://$staging/node_modules/openai/index.mjs" >&2 ||
  die "openai@$OPENAI_VERSION does not load (import) in Node.js $(node --version)"

rm -rf "$dest"
mv "$staging" "$dest"
date -u +%Y-%m-%dT%H:%M:%SZ >"$marker"
echo "install-node-deps: openai@$OPENAI_VERSION ready" >&2
echo "$modules"
