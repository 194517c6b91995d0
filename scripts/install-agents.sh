#!/usr/bin/env bash
# Installs the coding agents the tests drive against a split cluster, pinned: the Claude Code CLI
# (`@anthropic-ai/claude-code`) and the Codex CLI (`@openai/codex`), for
# tests/integration/agents_test.cpp.
#
# Both ship their program as a native binary inside a per-platform npm package (Linux x64 and
# arm64); nothing is downloaded at run time and no install script runs. They go into a cache
# folder outside the source tree,
#   ${TANDEM_CACHE:-$HOME/.cache/tandem}/node/agents-claude-code-<version>-codex-<version>/
# reused when a previous install completed. Prints that folder's bin/ (holding `claude` and
# `codex`) on stdout and nothing else there:
#   PATH=$(scripts/install-agents.sh):$PATH claude --version
#
# Environment: TANDEM_CACHE (cache root), TANDEM_CLAUDE_CODE_VERSION and TANDEM_CODEX_VERSION
# (override the pinned versions).
set -euo pipefail

CLAUDE_VERSION="${TANDEM_CLAUDE_CODE_VERSION:-2.1.332}"
CODEX_VERSION="${TANDEM_CODEX_VERSION:-0.171.0}"

die() { echo "install-agents: $*" >&2; exit 1; }

command -v npm >/dev/null || die "npm is not installed (scripts/install-deps.sh installs it)"
command -v node >/dev/null || die "node is not installed (the codex launcher is a Node.js script)"
case "$(uname -m)" in
  x86_64) platform=linux-x64 ;;
  aarch64 | arm64) platform=linux-arm64 ;;
  *) die "no agent binaries for $(uname -m): Claude Code and Codex ship Linux builds for x86_64 and aarch64" ;;
esac

cache_root="${TANDEM_CACHE:-$HOME/.cache/tandem}"
base="$cache_root/node"
dest="$base/agents-claude-code-$CLAUDE_VERSION-codex-$CODEX_VERSION"
marker="$dest/.tandem-complete"

# Complete means: the marker that is written last, and both programs answer --version.
is_complete() {
  [ -f "$marker" ] && "$dest/bin/claude" --version 2>/dev/null | grep -q "^$CLAUDE_VERSION" &&
    "$dest/bin/codex" --version 2>/dev/null | grep -q "$CODEX_VERSION"
}

if is_complete; then
  echo "$dest/bin"
  exit 0
fi

mkdir -p "$base"
# One installer at a time per cache; a second one waits, then finds the first one's result.
exec 9>"$base/.agents.lock"
flock -w 900 9 || die "timed out waiting for another install ($base/.agents.lock)"
if is_complete; then
  echo "$dest/bin"
  exit 0
fi

staging=$(mktemp -d "$base/.agents-$CLAUDE_VERSION-$CODEX_VERSION.XXXXXX")
log="$staging.log"
cleanup() { rm -rf "$staging"; rm -f "$log"; }
trap cleanup EXIT

printf '{ "name": "tandem-agents", "private": true }\n' >"$staging/package.json"
pkgs="@anthropic-ai/claude-code@$CLAUDE_VERSION @openai/codex@$CODEX_VERSION"
echo "install-agents: installing $pkgs into $dest (about 850 MB)" >&2
# --ignore-scripts: nothing from the packages runs at install time; the binaries are taken from
# the platform packages below instead of Claude Code's postinstall copy.
npm_rc=0
timeout 900 npm install --prefix "$staging" --no-audit --no-fund --no-package-lock --ignore-scripts \
  --prefer-offline --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 \
  --fetch-timeout=60000 --loglevel=error --engine-strict=false "@anthropic-ai/claude-code@$CLAUDE_VERSION" \
  "@openai/codex@$CODEX_VERSION" >"$log" 2>&1 || npm_rc=$?
if [ "$npm_rc" -ne 0 ]; then
  tail -n 20 "$log" >&2
  registry=$(npm config get registry 2>/dev/null || echo '?')
  [ "$npm_rc" -eq 124 ] && die "npm install $pkgs timed out after 900 s (registry: $registry)"
  die "npm install $pkgs failed (exit $npm_rc, registry: $registry); npm's output is above"
fi

claude="$staging/node_modules/@anthropic-ai/claude-code-$platform/claude"
codex="$staging/node_modules/@openai/codex/bin/codex.js"
[ -x "$claude" ] || die "npm finished but $claude is missing (the optional package @anthropic-ai/claude-code-$platform was not installed)"
[ -f "$codex" ] || die "npm finished but $codex is missing"
[ -d "$staging/node_modules/@openai/codex-$platform" ] ||
  die "npm finished but @openai/codex-$platform (the codex binary) was not installed"

rm -rf "$dest"
mv "$staging" "$dest"
mkdir -p "$dest/bin"
ln -sf "../node_modules/@anthropic-ai/claude-code-$platform/claude" "$dest/bin/claude"
printf '#!/bin/sh\nexec node "%s" "$@"\n' "$dest/node_modules/@openai/codex/bin/codex.js" >"$dest/bin/codex"
chmod +x "$dest/bin/codex"
"$dest/bin/claude" --version >&2 || die "$dest/bin/claude does not run on this machine"
"$dest/bin/codex" --version >&2 || die "$dest/bin/codex does not run on this machine"
date -u +%Y-%m-%dT%H:%M:%SZ >"$marker"
echo "install-agents: $pkgs ready" >&2
echo "$dest/bin"
