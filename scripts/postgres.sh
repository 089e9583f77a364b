#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for fleetmq's tests: initdb into a temp
# directory, listen on 127.0.0.1 only, on a free high port, trust auth for
# local and loopback connections. Nothing else on the machine is touched:
# no packaged cluster is started or stopped.
#
# scripts/test.sh sources this file and calls pg_test_start, which sets
# FLEETMQ_TEST_POSTGRES and stops the cluster when the script exits.
#
# By hand (a cluster that stays up until you stop it):
#   eval "$(bash scripts/postgres.sh start)"   # prints export lines
#   go test ./sqlstore/ ./internal/app/ ...
#   bash scripts/postgres.sh stop "$FLEETMQ_TEST_POSTGRES_DIR"

# pg_bin prints the newest installed server's bin directory, installing
# Debian's postgresql package first if there is none.
pg_bin() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [[ -z $bin || ! -x $bin/initdb ]]; then
    echo "==> installing Debian package: postgresql" >&2
    local sudo=
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  fi
  [[ -n $bin && -x $bin/initdb ]] || { echo "postgres.sh: no PostgreSQL server binaries under /usr/lib/postgresql" >&2; return 1; }
  echo "$bin"
}

# pg_as_owner runs a command as the cluster's OS user: postgres refuses to
# run as root, so root runs it as the postgres user.
pg_as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# pg_free_port prints a TCP port nothing listens on at 127.0.0.1.
pg_free_port() {
  local port
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  echo "postgres.sh: no free port found" >&2
  return 1
}

# pg_cluster_start starts a new cluster and prints "DIR PORT". The data
# directory is DIR/data; the server log DIR/server.log.
pg_cluster_start() {
  local bin dir port
  bin=$(pg_bin) || return 1
  dir=$(mktemp -d "${TMPDIR:-/tmp}/fleetmq-pg.XXXXXX")
  [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
  # --no-sync only skips flushing initdb's own files (a throwaway cluster);
  # the server itself runs with fsync on.
  pg_as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; return 1; }
  for _ in 1 2 3 4 5; do
    port=$(pg_free_port) || return 1
    cat >"$dir/data/postgresql.auto.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 300
fsync = on
EOF
    if pg_as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 start >/dev/null; then
      echo "$dir $port"
      return 0
    fi
    # Most likely the port was taken between the check and the start.
    tail -n 5 "$dir/server.log" >&2 || true
  done
  echo "postgres.sh: the server did not start (log: $dir/server.log)" >&2
  return 1
}

# pg_cluster_stop stops the cluster in DIR (and only it) and removes DIR.
pg_cluster_stop() {
  local dir=$1 bin
  [[ -n $dir && -f $dir/data/PG_VERSION ]] || return 0
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [[ -f $dir/data/postmaster.pid ]]; then
    pg_as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null || true
  fi
  rm -rf "$dir"
}

# pg_test_start starts a cluster for this shell, exports
# FLEETMQ_TEST_POSTGRES and stops the cluster on EXIT. A server the caller
# already named in FLEETMQ_TEST_POSTGRES is used instead.
pg_test_start() {
  if [[ -n ${FLEETMQ_TEST_POSTGRES:-} ]]; then
    echo "==> PostgreSQL: using FLEETMQ_TEST_POSTGRES from the environment"
    return 0
  fi
  local out
  out=$(pg_cluster_start) || return 1
  PG_TEST_DIR=${out% *}
  trap 'pg_cluster_stop "$PG_TEST_DIR"' EXIT
  trap 'exit 130' INT # run the EXIT trap on ^C and kill too
  trap 'exit 143' TERM
  export FLEETMQ_TEST_POSTGRES="postgres://postgres@127.0.0.1:${out#* }/postgres?sslmode=disable"
  echo "==> PostgreSQL: throwaway cluster on 127.0.0.1:${out#* } ($PG_TEST_DIR)"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  case ${1:-} in
  start)
    out=$(pg_cluster_start)
    echo "export FLEETMQ_TEST_POSTGRES='postgres://postgres@127.0.0.1:${out#* }/postgres?sslmode=disable'"
    echo "export FLEETMQ_TEST_POSTGRES_DIR='${out% *}'"
    ;;
  stop)
    [[ -n ${2:-} ]] || { echo "usage: $0 stop DIR" >&2; exit 2; }
    pg_cluster_stop "$2"
    ;;
  *)
    echo "usage: $0 start | stop DIR" >&2
    exit 2
    ;;
  esac
fi
