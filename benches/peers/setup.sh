#!/usr/bin/env bash
# Set up the other engines of `prefetch-bench --suite peers`: a Python virtual
# environment outside the clone (/var/tmp/dfprefetch-peers-venv by default,
# or $DFPREFETCH_PEERS_VENV) with pinned Polars, DuckDB and its httpfs and
# azure extensions (from PyPI: they load offline), PyArrow and
# datafusion-python, and this project's wheel for datafusion-python.
#
#   bash benches/peers/setup.sh            # the venv (seconds when warm)
#   bash benches/peers/setup.sh --server   # also an optimised S3 server build
#                                          # for benchmarking (a few minutes cold)
#   bash benches/peers/setup.sh --wheel    # also build (maturin, release) and
#                                          # install the datafusion_prefetch
#                                          # wheel (~30 minutes cold)
#
# Idempotent. Each engine is installed on its own: one that cannot be
# installed is reported here and skipped by the suite (which says why); this
# script then still exits 0, so CI never fails for a peer engine.
set -uo pipefail
cd "$(dirname "$0")/../.."

VENV="${DFPREFETCH_PEERS_VENV:-/var/tmp/dfprefetch-peers-venv}"
PYTHON="${PYTHON:-python3.11}"
# The pins. DuckDB and its extensions must be the same version. The azure
# extension (`--store azure` only) is installed on its own, so that DuckDB
# runs on the other stores without it.
ENGINES=(
  "polars==2.1.0"
  "duckdb==1.5.5 duckdb-extension-httpfs==1.5.5"
  "duckdb==1.5.5 duckdb-extension-azure==1.5.5"
  "pyarrow==26.0.1"
  "datafusion==55.0.0"
)

server=false wheel=false
for arg in "$@"; do
  case "$arg" in
    --server) server=true ;;
    --wheel) wheel=true ;;
    *) echo "setup.sh: unknown option $arg (--server, --wheel)" >&2; exit 2 ;;
  esac
done

if $server; then
  bash crates/s3-server/install.sh --release >/dev/null || echo "setup.sh: the optimised S3 server did not install; the suite uses the debug build" >&2
fi

if ! command -v "$PYTHON" >/dev/null; then
  echo "setup.sh: $PYTHON not found; the Python engines will be skipped" >&2
  exit 0
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV" || { echo "setup.sh: cannot create $VENV; the Python engines will be skipped" >&2; exit 0; }
fi

status=0
for pins in "${ENGINES[@]}"; do
  # Already installed at the pinned versions?
  # shellcheck disable=SC2086 # one engine's pins, split on purpose
  if "$VENV/bin/python" - $pins 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))
PY
  then
    continue
  fi
  echo "setup.sh: installing $pins into $VENV" >&2
  # shellcheck disable=SC2086
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check $pins; then
    echo "setup.sh: could not install $pins; the suite will skip that engine" >&2
    status=1
  fi
done
# The wheel of crates/python, optimised, beside datafusion-python (its own
# requirement, datafusion>=55,<56, is what the pins install).
if $wheel; then
  if "$VENV/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.9,<2"; then
    wheels=$(mktemp -d)
    if (cd crates/python \
        && CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/dfprefetch-target}" \
           "$VENV/bin/maturin" build --release --locked --quiet --out "$wheels") \
       && "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
            --force-reinstall --no-deps "$wheels"/datafusion_prefetch-*.whl; then
      echo "setup.sh: installed $(basename "$wheels"/datafusion_prefetch-*.whl) into $VENV" >&2
    else
      echo "setup.sh: the datafusion_prefetch wheel did not build or install; the suite skips datafusion-python + prefetch" >&2
      status=1
    fi
    rm -rf "$wheels"
  else
    echo "setup.sh: could not install maturin; the suite skips datafusion-python + prefetch" >&2
    status=1
  fi
fi
"$VENV/bin/python" benches/peers/peers.py probe
if [[ $status != 0 ]]; then
  echo "setup.sh: some engines are missing (see above)" >&2
fi
exit 0
