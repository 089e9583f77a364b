#!/usr/bin/env bash
# Runs fleetmq's whole test suite on a fresh Debian machine: installs what the
# tests need (Debian packages), starts a throwaway PostgreSQL cluster, then
# vet and the race-enabled tests.
#
#   bash scripts/test.sh            # everything
#   bash scripts/test.sh ./mqtt/... # only some packages
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v mosquitto_pub >/dev/null 2>&1 || need+=(mosquitto-clients)
command -v mosquitto >/dev/null 2>&1 || [[ -x /usr/sbin/mosquitto ]] || need+=(mosquitto)
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev) # cgo: the SQLite driver
command -v curl >/dev/null 2>&1 || need+=(curl) # docs/api.md's examples (TestDocsAPIRunsAsWritten)
command -v jq >/dev/null 2>&1 || need+=(jq)     # docs/api.md's examples read fields with it
[[ -x /usr/bin/chromium ]] || need+=(chromium) # the browser tests (web/api, web/portal)
command -v haproxy >/dev/null 2>&1 || [[ -x /usr/sbin/haproxy ]] || need+=(haproxy) # docs/cluster.md's load balancer (TestClusterBehindHAProxy)
if [[ -z ${FLEETMQ_TEST_POSTGRES:-} ]] && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  need+=(postgresql) # the server for the PostgreSQL store tests
fi
if ((${#need[@]})); then
  echo "==> installing Debian packages: ${need[*]}"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The packaged mosquitto service is not used by the tests (they start their own
# on loopback ports); nothing here stops it.

# PostgreSQL: a throwaway cluster on 127.0.0.1 for this run (installing
# Debian's postgresql package if no server is installed), stopped on exit.
# Its URL goes to the tests in FLEETMQ_TEST_POSTGRES; a server already named
# there is used instead. The packaged cluster, if any, is left alone.
source scripts/postgres.sh
pg_test_start

pkgs=("$@")
((${#pkgs[@]})) || pkgs=(./...)

echo "==> gofmt"
unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
  echo "gofmt would change these files (run gofmt -w on them):"
  echo "$unformatted"
  exit 1
fi
echo "==> go vet"
go vet "${pkgs[@]}"
echo "==> staticcheck"
# Pinned, fetched from the module proxy and built on first use (not a
# dependency of the module: it is not in go.mod).
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 "${pkgs[@]}"
echo "==> go test -race"
# The tools installed above are present: tests that use them must not skip.
export FLEETMQ_REQUIRE_TOOLS=1
go test -race -count=1 -timeout 20m "${pkgs[@]}"
