#!/usr/bin/env bash
# Install what the browser tests (tests/browser) and scripts/screenshots.py need: headless
# Chromium and its WebDriver from Debian packages (chromium, chromium-driver). selenium itself
# is in the dev extra. Idempotent: does nothing when both are already there. Used by `make test`.
#
#   scripts/install_browser.sh
#
# Needs root (or sudo) and apt-get; without them it says so and exits 0 (the browser tests then
# skip, naming this script).
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "install_browser.sh: not root and no sudo: skipping Chromium (browser tests will skip)" >&2
        exit 0
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_browser.sh: no apt-get: install Chromium and chromedriver yourself (browser tests will skip)" >&2
    exit 0
fi
# ~100 Debian packages (the browser and its libraries): quiet unless it fails
echo "install_browser.sh: installing Chromium (Debian packages chromium chromium-driver)" >&2
log=$(mktemp)
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install \
        -y -qq chromium chromium-driver; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "install_browser.sh: apt-get failed (output above); browser tests will skip" >&2
    exit 0
fi
rm -f "$log"
chromium --version
