#!/usr/bin/env bash
# Install s3s-fs, the S3-compatible server that the real-wire tests and
# `prefetch-bench --suite peers` run on loopback, from crates.io with the
# Cargo.lock it was published with, into a folder outside any clone
# (/var/tmp/dfprefetch-s3s by default), where every clone and CI run finds it.
#
#   bash crates/s3-server/install.sh            # debug build: tests and CI (~1 min cold)
#   bash crates/s3-server/install.sh --release  # optimised build: benchmarks (a few min cold)
#
# Idempotent: when the pinned version is installed it only prints its path.
# Prints the binary's path on stdout; cargo's output goes to stderr.
set -euo pipefail

VERSION=0.14.1
PREFIX="${DFPREFETCH_S3S_PREFIX:-/var/tmp/dfprefetch-s3s}"
profile=debug
case "${1:-}" in
  "") ;;
  --release) profile=release ;;
  *) echo "usage: $0 [--release]" >&2; exit 2 ;;
esac
root="$PREFIX/$VERSION/$profile"
bin="$root/bin/s3s-fs"

installed() {
  [[ -x "$bin" ]] && [[ "$("$bin" --version 2>/dev/null)" == "s3s-fs $VERSION" ]]
}

if installed; then
  echo "$bin"
  exit 0
fi

mkdir -p "$PREFIX"
# One install at a time (parallel test binaries, CI and a developer may race).
exec 9>"$PREFIX/.install.lock"
flock 9
if installed; then
  echo "$bin"
  exit 0
fi

if ! command -v cargo >/dev/null; then
  echo "install.sh: cargo is needed to build s3s-fs $VERSION" >&2
  exit 1
fi
echo "installing s3s-fs $VERSION ($profile build) into $root" >&2
args=(install s3s-fs --version "$VERSION" --features binary --locked
      --root "$root" --target-dir "$PREFIX/build-$profile")
if [[ $profile == debug ]]; then
  args+=(--debug)
fi
# Outside the clone: no project toolchain file or cargo config applies.
cd "$PREFIX"
env -u CARGO_TARGET_DIR -u RUSTFLAGS -u CARGO_BUILD_TARGET cargo "${args[@]}" >&2
rm -rf "$PREFIX/build-$profile"
installed || { echo "install.sh: s3s-fs $VERSION did not install to $bin" >&2; exit 1; }
echo "$bin"
