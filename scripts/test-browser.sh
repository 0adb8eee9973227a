#!/usr/bin/env bash
# Installs Debian's headless Chromium and its WebDriver (chromium-driver) for the dashboard's
# browser tests (docs/ui.md#tests), once: a machine that already has both is left alone.
# Prints `ONESTEP_TEST_CHROMEDRIVER=<path>` and `ONESTEP_TEST_CHROMIUM=<path>` for `eval`.
set -euo pipefail
if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1; then
    echo "installing chromium + chromium-driver (apt)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >&2
fi
echo "ONESTEP_TEST_CHROMEDRIVER=$(command -v chromedriver)"
echo "ONESTEP_TEST_CHROMIUM=$(command -v chromium)"
