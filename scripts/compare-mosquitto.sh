#!/usr/bin/env bash
# Compare fleetmq's bare broker with Mosquitto under the same loads, in one
# run, several rounds in alternating order (see internal/loadtest and
# docs/benchmarks.md). Installs Mosquitto from Debian if it is missing.
#
#   bash scripts/compare-mosquitto.sh                 # 3 rounds, all loads (~15 min)
#   bash scripts/compare-mosquitto.sh -rounds 1 -only fixed-rate-qos1
#
# Extra arguments go to "fleetmq bench compare" (run it with -h for the list).
# Results are also written as JSON lines to bench-results/compare-DATE.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! [ -x /usr/sbin/mosquitto ]; then
	echo "installing mosquitto (Debian package)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq mosquitto >/dev/null
fi
# The Debian package may start a system Mosquitto on port 1883; the
# comparison uses its own instances on other loopback ports and leaves that alone.

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/fleetmq" ./cmd/fleetmq

mkdir -p bench-results
out="bench-results/compare-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
echo "$(date -u) $(nproc) cores, $(/usr/sbin/mosquitto -h | head -1)" >&2
"$bin/fleetmq" bench compare -fleetmq "$bin/fleetmq" -mosquitto /usr/sbin/mosquitto -out "$out" "$@"
echo "results: $out" >&2
