#!/usr/bin/env bash
# `make build`'s configure step: configures BUILD_DIR with CMake when it has no build.ninja yet, or
# when other CMake flags are given than the ones it was configured with.
#
#   configure.sh BUILD_DIR [CMAKE_FLAG...]
#
# The flags a folder was configured with are kept in BUILD_DIR/tandem-cmake-flags:
#   - no flags given: the folder keeps its configuration (a plain `make test` after
#     `make build CMAKE_FLAGS=...` tests that build), and says so when it has flags;
#   - the same flags: nothing to do (CMake itself re-runs when a CMakeLists.txt changes);
#   - other flags: CMakeCache.txt is removed and the folder configured with exactly these flags, so
#     a flag given before and left out now is gone too. Objects stay: ninja rebuilds only what the
#     new configuration changes.
# Environment: CMAKE (the cmake to run; tests give a fake one).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: configure.sh BUILD_DIR [CMAKE_FLAG...]}
shift
cmake=${CMAKE:-cmake}
stamp=$build/tandem-cmake-flags
want=""
[ $# -gt 0 ] && want=$(printf '%q ' "$@")
want=${want% }

if [ -f "$build/build.ninja" ] && [ -f "$build/CMakeCache.txt" ]; then
  if [ -f "$stamp" ]; then
    have=$(cat "$stamp")
  else
    have=""  # configured before the flags were recorded: taken as configured without flags
  fi
  if [ $# -eq 0 ] || [ "$want" = "$have" ]; then
    [ -f "$stamp" ] || printf '%s' "$have" >"$stamp"
    [ $# -eq 0 ] && [ -n "$have" ] && echo "configure: $build keeps CMAKE_FLAGS=\"$have\" (give other CMAKE_FLAGS to change them)" >&2
    exit 0
  fi
  echo "configure: CMAKE_FLAGS changed (\"$have\" -> \"$want\"): configuring $build again" >&2
  rm -f "$build/CMakeCache.txt"
fi
mkdir -p "$build"
rm -f "$stamp"
"$cmake" -S "$root" -B "$build" -G Ninja "$@"
printf '%s' "$want" >"$stamp"
