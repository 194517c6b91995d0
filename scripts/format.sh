#!/usr/bin/env bash
# `make format`: formats every tracked C++ file of src/ and tests/ by .clang-format; with --check,
# changes nothing and lists the files that differ (the test Format.EverySourceFileIsFormatted).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v clang-format >/dev/null || { echo "format: clang-format is not installed (apt-get install clang-format)" >&2; exit 1; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.h' 'tests/*.cpp' 'tests/*.h')
else
  mapfile -t files < <(find src tests -name '*.cpp' -o -name '*.h' | sort)
fi
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "not formatted by .clang-format ($(clang-format --version | sed 's/.*version //')); run \`make format\`:" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
