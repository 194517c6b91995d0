#!/usr/bin/env bash
# Installs a built tandem on this machine for systemd (docs/deploy.md), as root:
#   - tandem and tandem-engine into PREFIX/bin (default /usr/local/bin);
#   - the llama.cpp shared libraries they were linked with into PREFIX/lib/tandem, made known to
#     the dynamic linker (/etc/ld.so.conf.d/tandem.conf): the build links them from the build
#     cache under the builder's home folder, which the units' ProtectHome= hides;
#   - the system user `tandem` (no login, no home) and /etc/tandem.
# Usage: scripts/install-tandem.sh [BUILD_DIR] (default: build). PREFIX= in the environment.
set -euo pipefail
build="${1:-build}"
prefix="${PREFIX:-/usr/local}"
die() { echo "install-tandem: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (it writes $prefix, /etc and creates a user)"
[ -x "$build/tandem" ] && [ -x "$build/tandem-engine" ] || die "$build/tandem or $build/tandem-engine is missing: run 'make build' first"

# The folder holding libllama.so is the one the engine was linked against (its RUNPATH).
libdir=$(readelf -d "$build/tandem-engine" | sed -n 's/.*R\(UN\)\{0,1\}PATH.*\[\(.*\)\]/\2/p' | tr ':' '\n' |
         while read -r d; do [ -n "$d" ] && [ -e "$d/libllama.so" ] && echo "$d" && break; done)
[ -n "$libdir" ] || die "cannot find the llama.cpp libraries tandem-engine was linked with"

install -d "$prefix/bin" "$prefix/lib/tandem"
install -m 0755 "$build/tandem" "$build/tandem-engine" "$prefix/bin/"
cp -a "$libdir"/*.so* "$prefix/lib/tandem/"
echo "$prefix/lib/tandem" >/etc/ld.so.conf.d/tandem.conf
ldconfig

getent group tandem >/dev/null || groupadd --system tandem
getent passwd tandem >/dev/null ||
  useradd --system --gid tandem --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin tandem
# GPUs are often reachable only by these groups.
for g in video render; do getent group "$g" >/dev/null && usermod -a -G "$g" tandem; done
install -d -m 0750 -o root -g tandem /etc/tandem

echo "install-tandem: $prefix/bin/tandem ($("$prefix/bin/tandem" version | head -n 1)), libraries in $prefix/lib/tandem, user tandem"
