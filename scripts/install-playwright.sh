#!/usr/bin/env bash
# Installs the npm package `playwright-core`, pinned, for tests/integration/status_page.mjs: it
# drives the machine's own Chromium or Chrome (scripts/find-browser.sh) headless.
# playwright-core downloads no browser (unlike `playwright`), so nothing but the npm registry is
# needed.
#
# It goes into ${TANDEM_CACHE:-$HOME/.cache/tandem}/node/playwright-core-<version>/node_modules and
# is reused when a previous install completed. Prints that node_modules path on stdout (and nothing
# else there). Environment: TANDEM_CACHE (cache root), TANDEM_PLAYWRIGHT_VERSION (another version).
set -euo pipefail

VERSION="${TANDEM_PLAYWRIGHT_VERSION:-1.65.1}"

die() { echo "install-playwright: $*" >&2; exit 1; }

# The Node.js the page test runs on (scripts/node.sh: >= 22, a pinned one when the system's is
# older); npm may be the distribution's.
node=$("$(dirname "$0")/node.sh") || die "no Node.js >= 22 (scripts/node.sh says why above)"
node() { "$node" "$@"; }
command -v npm >/dev/null || die "npm is not installed (scripts/install-deps.sh installs it)"

base="${TANDEM_CACHE:-$HOME/.cache/tandem}/node"
dest="$base/playwright-core-$VERSION"
modules="$dest/node_modules"
marker="$dest/.tandem-complete"

installed_version() {
  node -e 'try { process.stdout.write(require(process.argv[1]).version) } catch (e) {}' \
    "$1/playwright-core/package.json" 2>/dev/null || true
}
is_complete() { [ -f "$marker" ] && [ "$(installed_version "$modules")" = "$VERSION" ]; }

if is_complete; then
  echo "$modules"
  exit 0
fi
mkdir -p "$base"
# One installer at a time per cache; a second one waits, then finds the first one's result.
exec 9>"$base/.lock-playwright"
flock -w 600 9 || die "timed out waiting for another install ($base/.lock-playwright)"
if is_complete; then
  echo "$modules"
  exit 0
fi

staging=$(mktemp -d "$base/.playwright-core-$VERSION.XXXXXX")
cleanup() { rm -rf "$staging" "$staging.log"; }
trap cleanup EXIT
printf '{ "name": "tandem-playwright", "private": true }\n' >"$staging/package.json"
echo "install-playwright: installing playwright-core@$VERSION into $dest" >&2
# --ignore-scripts: nothing from the package runs at install time (and no browser is fetched).
rc=0
timeout 600 npm install --prefix "$staging" --no-audit --no-fund --no-package-lock --ignore-scripts \
  --prefer-offline --fetch-retries=1 --fetch-timeout=30000 --loglevel=error "playwright-core@$VERSION" \
  >"$staging.log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
  tail -n 20 "$staging.log" >&2
  die "npm install playwright-core@$VERSION failed (exit $rc, registry: $(npm config get registry 2>/dev/null || echo '?'))"
fi
got=$(installed_version "$staging/node_modules")
[ "$got" = "$VERSION" ] || die "npm finished but playwright-core has version '${got:-none}', not $VERSION"
node -e 'require(process.argv[1])' "$staging/node_modules/playwright-core" >&2 ||
  die "playwright-core@$VERSION does not load in Node.js $(node --version)"
rm -rf "$dest"
mv "$staging" "$dest"
date -u +%Y-%m-%dT%H:%M:%SZ >"$marker"
echo "install-playwright: playwright-core@$VERSION ready" >&2
echo "$modules"
