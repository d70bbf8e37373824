#!/usr/bin/env bash
# Start or stop a local PostgreSQL server for the Dagster instance in infra/dagster.yaml.
#
#   infra/postgres.sh start [DATA_DIR] [PORT]   # prints the DAGSTER_PG_* exports
#   infra/postgres.sh stop  [DATA_DIR]
#   eval "$(infra/postgres.sh start)"           # start and export in one go
#
# DATA_DIR defaults to .dagster-postgres at the repository root (git-ignored), PORT to
# 5432. `start` creates the cluster if DATA_DIR holds none (initdb), starts it listening
# on 127.0.0.1:PORT only (no unix sockets), creates the database and prints the exports
# on stdout (everything else goes to stderr); it does nothing but print them when the
# server is already running. The server log is DATA_DIR/postgres.log.
#
# Settings, read when the cluster or database is created: DAGSTER_PG_USERNAME (default
# dagster, the cluster's superuser), DAGSTER_PG_DB (dagster) and DAGSTER_PG_PASSWORD
# (default empty: any local connection is trusted; set, it becomes the user's password
# and connections must give it). PG_OS_USER (default postgres) is the OS user that runs
# the server when this script runs as root, since initdb and postgres refuse root.
# Binaries: initdb on PATH, else the newest /usr/lib/postgresql/*/bin; if there are none,
# `start` as root installs Debian's postgresql package with apt-get.
set -euo pipefail

cmd=${1:?usage: postgres.sh start [DATA_DIR] [PORT] | stop [DATA_DIR]}
here=$(cd "$(dirname "$0")/.." && pwd)
data=$(realpath -m "${2:-$here/.dagster-postgres}")
port=${3:-5432}
[[ $port =~ ^[0-9]+$ ]] || { echo "postgres.sh: PORT must be a number, not '$port'" >&2; exit 2; }
host=127.0.0.1
user=${DAGSTER_PG_USERNAME:-dagster}
db=${DAGSTER_PG_DB:-dagster}
password=${DAGSTER_PG_PASSWORD:-}
os_user=${PG_OS_USER:-postgres}

say() { echo "postgres.sh: $*" >&2; }
die() { say "$*"; exit 1; }

find_bin() {
  local initdb newest
  if initdb=$(command -v initdb); then
    dirname "$(readlink -f "$initdb")"
    return 0
  fi
  newest=$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | grep -v '\*' | sort -V | tail -n 1)
  [ -n "$newest" ] && [ -x "$newest" ] || return 1
  dirname "$newest"
}

install_postgres() {
  [ "$(id -u)" -eq 0 ] || die "no PostgreSQL server found (initdb); install the postgresql package"
  command -v apt-get >/dev/null || die "no PostgreSQL server found (initdb) and no apt-get to install it"
  say "no PostgreSQL server found; installing Debian's postgresql package"
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >&2
}

# Run a server program: as PG_OS_USER when we are root, from a directory it can enter.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    (cd / && runuser -u "$os_user" -- "$@")
  else
    "$@"
  fi
}

running() {
  [ -f "$data/postmaster.pid" ] && as_pg "$bin/pg_ctl" status -D "$data" >/dev/null 2>&1
}

psql_admin() {
  PGPASSWORD=$password "$psql" -h "$host" -p "$port" -U "$user" -d postgres \
    -v ON_ERROR_STOP=1 -qAt "$@"
}

case "$cmd" in
  start)
    if ! bin=$(find_bin); then
      install_postgres
      bin=$(find_bin) || die "PostgreSQL installed but initdb still not found"
    fi
    psql=$bin/psql
    [ -x "$psql" ] || psql=$(command -v psql) || die "psql not found (install postgresql-client)"
    if [ "$(id -u)" -eq 0 ]; then
      id "$os_user" >/dev/null 2>&1 ||
        die "running as root, and initdb/postgres refuse root, but there is no OS user" \
          "'$os_user' to run them as (set PG_OS_USER or create the user)"
      command -v runuser >/dev/null || die "running as root but runuser (util-linux) is missing"
    fi

    if [ ! -f "$data/PG_VERSION" ]; then
      mkdir -p "$data"
      if [ "$(id -u)" -eq 0 ]; then
        chown "$os_user:" "$data"
      fi
      chmod 700 "$data"
      as_pg test -w "$data" ||
        die "user '$os_user' cannot write $data (is a parent directory closed to it?);" \
          "pass a DATA_DIR it can reach"
      auth=(--auth=trust)
      pwfile=
      if [ -n "$password" ]; then
        pwfile=$(mktemp)
        trap 'rm -f "$pwfile"' EXIT
        printf '%s\n' "$password" >"$pwfile"
        if [ "$(id -u)" -eq 0 ]; then
          chown "$os_user:" "$pwfile"
        fi
        auth=(--auth=scram-sha-256 "--pwfile=$pwfile")
      fi
      say "creating a cluster in $data (superuser $user)"
      as_pg "$bin/initdb" -D "$data" -U "$user" --encoding=UTF8 --no-locale "${auth[@]}" >&2
      [ -z "$pwfile" ] || rm -f "$pwfile"
      cat >>"$data/postgresql.conf" <<'EOF'

# infra/postgres.sh: TCP on the loopback interface only, no unix sockets; the port is
# given on the command line by `infra/postgres.sh start`.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
EOF
    fi

    if running; then
      actual=$(sed -n 4p "$data/postmaster.pid")
      if [ "$actual" != "$port" ]; then
        say "already running on port $actual (not $port); stop it first to change the port"
        port=$actual
      else
        say "already running on $host:$port"
      fi
    else
      as_pg "$bin/pg_ctl" start -D "$data" -l "$data/postgres.log" -w -t 60 -o "-p $port" >&2 || {
        tail -n 30 "$data/postgres.log" >&2 || true
        die "the server did not start; see $data/postgres.log"
      }
    fi

    if [ -z "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '${db//\'/\'\'}'")" ]; then
      say "creating database $db"
      psql_admin -c "CREATE DATABASE \"${db//\"/\"\"}\""
    fi

    printf 'export DAGSTER_PG_USERNAME=%q\n' "$user"
    printf 'export DAGSTER_PG_PASSWORD=%q\n' "$password"
    printf 'export DAGSTER_PG_HOST=%q\n' "$host"
    printf 'export DAGSTER_PG_PORT=%q\n' "$port"
    printf 'export DAGSTER_PG_DB=%q\n' "$db"
    ;;
  stop)
    [ -f "$data/postmaster.pid" ] || { say "not running ($data)"; exit 0; }
    bin=$(find_bin) || die "no PostgreSQL server binaries (pg_ctl) found"
    if running; then
      as_pg "$bin/pg_ctl" stop -D "$data" -m fast -w -t 60 >&2
    else
      say "not running ($data)"
    fi
    ;;
  *)
    echo "unknown command: $cmd" >&2
    exit 2
    ;;
esac
