#!/usr/bin/env bash
# Makes Prometheus' `promtool` available for the /metrics test (`promtool check metrics`), without
# installing the Prometheus server: Debian's `prometheus` package is downloaded and unpacked into
# ${TANDEM_CACHE:-$HOME/.cache/tandem}/promtool-<version>, and only its promtool is used. A promtool
# already on the PATH is used as it is. Prints the promtool path on stdout (and nothing else there).
set -euo pipefail

die() { echo "install-promtool: $*" >&2; exit 1; }

if command -v promtool >/dev/null; then
  command -v promtool
  exit 0
fi
command -v apt-get >/dev/null || die "no promtool on the PATH and no apt-get to fetch Debian's"
version=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  # The package lists may be missing on a fresh machine.
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq >/dev/null; else sudo apt-get update -qq >/dev/null; fi
  version=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
fi
[ -n "$version" ] && [ "$version" != "(none)" ] || die "Debian's prometheus package is not available here"

dest="${TANDEM_CACHE:-$HOME/.cache/tandem}/promtool-${version//[:~]/_}"
tool="$dest/usr/bin/promtool"
if [ ! -x "$tool" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download -qq "prometheus=$version" >/dev/null 2>&1) || die "apt-get download prometheus=$version failed"
  rm -rf "$dest.part"
  mkdir -p "$dest.part"
  dpkg -x "$work"/prometheus_*.deb "$dest.part"
  [ -x "$dest.part/usr/bin/promtool" ] || die "the prometheus package holds no usr/bin/promtool"
  rm -rf "$dest"
  mv "$dest.part" "$dest"
  echo "install-promtool: promtool $version ready in $dest" >&2
fi
echo "$tool"
