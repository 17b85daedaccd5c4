#!/usr/bin/env bash
# Install Azurite, Microsoft's Azure Storage emulator, whose blob service the
# Azure real-wire tests run on loopback. From the npm registry with the
# package-lock.json beside this script (`npm ci`: every one of its ~370
# packages at the locked version and integrity hash; no install scripts run).
#
#   bash crates/wire-servers/install-azure.sh
#
# Installs into /var/tmp/dfprefetch-wire/azure/3.35.0/ ($DFPREFETCH_WIRE_PREFIX
# moves it) and prints the launcher of the blob service,
# .../node_modules/.bin/azurite-blob, on stdout; progress goes to stderr.
# Idempotent: when it is there it only prints the path. Needs Node.js and npm;
# no root. About 20 s and 190 MB.
#
# 3.35.0 is the newest Azurite whose package allows Node.js 20 (3.36 asks for
# Node >= 21, 3.37 for >= 22). It accepts object_store 0.13.2's x-ms-version
# (2023-11-03) without --skipApiVersionCheck.
set -euo pipefail
WIRE_SCRIPT=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=install-common.sh
source "$here/install-common.sh"

VERSION=3.35.0
root="$WIRE_PREFIX/azure/$VERSION"
bin="$root/node_modules/.bin/azurite-blob"
lock_sum=$(sha256sum "$here/azurite/package-lock.json" | cut -d' ' -f1)
stamp="azurite $VERSION $lock_sum"

installed() {
  [[ -x "$bin" ]] && wire_stamp_ok "$root" "$stamp"
}

if installed; then
  echo "$bin"
  exit 0
fi
wire_lock azure
if installed; then
  echo "$bin"
  exit 0
fi

command -v node >/dev/null || wire_die "Node.js is needed to run Azurite $VERSION (node not found)"
command -v npm >/dev/null || wire_die "npm is needed to install Azurite $VERSION (npm not found)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
((node_major >= 18)) || wire_die "Azurite $VERSION needs Node.js 18 or newer (this is $(node --version))"

echo "installing Azurite $VERSION into $root (npm ci, ~20 s)" >&2
wire_staging "$root"
cp "$here/azurite/package.json" "$here/azurite/package-lock.json" "$WIRE_STAGING/"
(
  cd "$WIRE_STAGING"
  # No project .npmrc applies here; the user's registry settings do.
  npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error >&2
) || wire_die "npm ci failed (is the npm registry reachable?)"
got=$("$WIRE_STAGING/node_modules/.bin/azurite-blob" --version 2>/dev/null || true)
[[ "$got" == "$VERSION" ]] || wire_die "the installed azurite-blob reports '$got', expected $VERSION"
wire_publish "$root" "$stamp"
installed || wire_die "Azurite $VERSION did not install to $bin"
echo "$bin"
