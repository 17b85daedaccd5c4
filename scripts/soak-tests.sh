#!/usr/bin/env bash
# Soak the timing-sensitive integration tests: run the governor, ledger,
# executions, memory-pressure, timeline and fault tests RUNS times in a row
# while every core is kept busy, and print runs/failures.
#
#   scripts/soak-tests.sh [RUNS] [FILTER...]
#
# RUNS defaults to 30; FILTERs (libtest name filters) default to the modules
# above. The load is stress-ng's cpu stressor when it is installed (Debian
# package stress-ng), else one busy shell loop per core. The test binary is
# built once, before the load starts; each run is the binary run on its own,
# so a failure names its run, and its output is kept under $SOAK_LOGS
# (default /var/tmp/dfprefetch-soak). Exits non-zero if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-30}"
shift || true
if [ "$#" -eq 0 ]; then
  set -- governor:: ledger:: executions:: memory_pressure:: timeline:: faults::
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/dfprefetch-target}"
logs="${SOAK_LOGS:-/var/tmp/dfprefetch-soak}"
mkdir -p "$logs"
rm -f "$logs"/run-*.log

# Build first (unloaded), and find the integration test binary cargo built.
binary=$(cargo test -p datafusion-prefetch --test integration --locked --no-run \
  --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "integration" and m.get("executable"):
        print(m["executable"])
')
[ -x "$binary" ] || { echo "soak: no integration test binary" >&2; exit 2; }

cores=$(nproc)
load_pids=()
stop_load() {
  for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_load EXIT
if command -v stress-ng >/dev/null; then
  load="stress-ng --cpu $cores"
  stress-ng --cpu "$cores" --quiet &
  load_pids+=($!)
else
  load="$cores busy shell loops"
  for _ in $(seq "$cores"); do
    sh -c 'while :; do :; done' &
    load_pids+=($!)
  done
fi

echo "soak: $runs runs of [$*] under $load, logs in $logs"
started=$(date +%s)
failures=0
for run in $(seq "$runs"); do
  log="$logs/run-$run.log"
  t0=$(date +%s)
  if "$binary" "$@" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failures=$((failures + 1))
  fi
  summary=$(grep -E '^test result:' "$log" | tail -1 || true)
  echo "run $run/$runs: $status ($(($(date +%s) - t0)) s) $summary"
  if [ "$status" = FAILED ]; then
    grep -E '^test .* FAILED$|panicked at' "$log" | head -10 | sed 's/^/    /'
  fi
done
elapsed=$(($(date +%s) - started))
echo "soak: $runs runs, $failures failures, $((elapsed / 60)) min $((elapsed % 60)) s under $load"
[ "$failures" -eq 0 ]
