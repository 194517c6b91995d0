#!/usr/bin/env bash
# `make format`: formats every tracked C++ file of src/ and tests/ by .clang-format; with --check,
# changes nothing and lists the files that differ (the test Format.EverySourceFileIsFormatted);
# with --which, prints the clang-format it uses and exits.
#
# The clang-format is pinned to major version 14, whatever the distribution's default: each major
# version formats some code differently (Ubuntu 24.04's default 18 reformats files that 14, Debian
# 12's default, leaves alone). In order: $TANDEM_CLANG_FORMAT (which must be 14), clang-format-14
# on PATH, /usr/lib/llvm-14/bin/clang-format, then clang-format on PATH when it is 14. Debian 12 and
# Ubuntu 24.04 both package clang-format-14 (scripts/install-deps.sh --test installs it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
readonly PINNED_MAJOR=14
major_of() { "$1" --version 2>/dev/null | sed -n 's/.*clang-format version \([0-9]*\)\..*/\1/p' | head -n 1; }
find_clang_format() {
  local c
  if [ -n "${TANDEM_CLANG_FORMAT:-}" ]; then
    [ "$(major_of "$TANDEM_CLANG_FORMAT")" = "$PINNED_MAJOR" ] ||
      { echo "format: TANDEM_CLANG_FORMAT=$TANDEM_CLANG_FORMAT is not clang-format $PINNED_MAJOR ($("$TANDEM_CLANG_FORMAT" --version 2>&1 | head -n 1))" >&2; return 1; }
    echo "$TANDEM_CLANG_FORMAT"
    return 0
  fi
  for c in "$(command -v clang-format-$PINNED_MAJOR 2>/dev/null || true)" "/usr/lib/llvm-$PINNED_MAJOR/bin/clang-format" \
           "$(command -v clang-format 2>/dev/null || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && [ "$(major_of "$c")" = "$PINNED_MAJOR" ] && { echo "$c"; return 0; }
  done
  echo "format: clang-format $PINNED_MAJOR is not installed (the format is pinned to it; found: $(clang-format --version 2>/dev/null | head -n 1 || echo none)). Install the package clang-format-$PINNED_MAJOR (scripts/install-deps.sh --test does), or set TANDEM_CLANG_FORMAT" >&2
  return 1
}
clang_format=$(find_clang_format) || exit 1
clang-format() { "$clang_format" "$@"; }
if [ "${1:-}" = "--which" ]; then
  echo "$clang_format"
  exit 0
fi
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
