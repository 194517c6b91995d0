#!/usr/bin/env bash
# Prints the path of a Chromium or Chrome that the status page test can drive headless, and
# nothing else on stdout; exits 1, saying on stderr where it looked, when the machine has none.
#
# In order: $TANDEM_BROWSER (that program, which must exist); then chromium on PATH,
# /usr/bin/chromium (Debian's package), /snap/bin/chromium (Ubuntu's, a snap), chromium-browser,
# google-chrome, google-chrome-stable, chrome on PATH, /opt/google/chrome/chrome (Google's .deb).
# The snap comes before chromium-browser, Ubuntu's transitional wrapper that runs it. A candidate
# must answer --version with Chromium's or Chrome's name: a wrapper whose snap is not installed
# does not.
#
# For tests: TANDEM_BROWSER_CANDIDATES replaces that list (names, or paths with a '/').
set -uo pipefail
candidates=${TANDEM_BROWSER_CANDIDATES-chromium /usr/bin/chromium /snap/bin/chromium chromium-browser google-chrome google-chrome-stable chrome /opt/google/chrome/chrome}

answers() {  # a browser that runs prints e.g. "Chromium 120.0..." or "Google Chrome 120.0..."
  local v
  v=$(timeout 30 "$1" --version 2>/dev/null | head -n 1) || return 1
  [[ "$v" =~ (Chromium|Chrome)\ [0-9] ]]
}

if [ -n "${TANDEM_BROWSER:-}" ]; then
  [ -x "$TANDEM_BROWSER" ] || { echo "find-browser: TANDEM_BROWSER=$TANDEM_BROWSER is not an executable" >&2; exit 1; }
  echo "$TANDEM_BROWSER"
  exit 0
fi
looked=()
for c in $candidates; do
  if [[ "$c" == */* ]]; then
    p=$c
  else
    p=$(command -v "$c" 2>/dev/null) || { looked+=("$c"); continue; }
  fi
  looked+=("$p")
  [ -x "$p" ] && answers "$p" && { echo "$p"; exit 0; }
done
echo "find-browser: no Chromium or Chrome on this machine (looked for: ${looked[*]}). On Debian: apt-get install chromium (scripts/install-deps.sh --test does); on Ubuntu: snap install chromium, or Google Chrome's package; or set TANDEM_BROWSER=/path/to/chrome" >&2
exit 1
