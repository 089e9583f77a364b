#!/usr/bin/env bash
# Runs tests many times with the CPUs kept busy, to find the tests that
# depend on timing (a flaky test fails here long before it fails in CI).
# Run scripts/test.sh once first: it installs what the tests need.
#
#   bash scripts/stress.sh 10                        # every package, 10 times
#   bash scripts/stress.sh 20 ./mqtt/... ./web/api/  # some packages
#
# One busy loop per core runs beside the tests (each stopped when the script
# exits, and by timeout after an hour at most); a throwaway PostgreSQL
# cluster serves the PostgreSQL tests, as in scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

count=${1:-10}
shift || true
pkgs=("$@")
((${#pkgs[@]})) || pkgs=(./...)

source scripts/postgres.sh
pg_test_start

burners=()
stop() {
  ((${#burners[@]})) && kill "${burners[@]}" 2>/dev/null
  [[ -n ${PG_TEST_DIR:-} ]] && pg_cluster_stop "$PG_TEST_DIR"
  return 0
}
trap stop EXIT # replaces pg_test_start's trap, and does its work too
for _ in $(seq "$(nproc)"); do
  timeout 3600 bash -c 'while :; do :; done' &
  burners+=($!)
done

echo "==> go test -race -count=$count with $(nproc) busy loops beside it"
export FLEETMQ_REQUIRE_TOOLS=1
go test -race -count="$count" -timeout 60m "${pkgs[@]}"
