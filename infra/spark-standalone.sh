#!/usr/bin/env bash
# Start or stop a Spark standalone cluster (one master, one or more workers) from
# the Spark that pyspark ships, for running dd_etl jobs on a cluster instead of
# local[*].
#
#   infra/spark-standalone.sh start [STATE_DIR]   # prints the master URL (last line)
#   infra/spark-standalone.sh stop  [STATE_DIR]
#
# Settings: SPARK_MASTER_HOST (default 127.0.0.1), SPARK_MASTER_PORT (7077),
# SPARK_WORKER_INSTANCES (1: workers on this machine), SPARK_WORKER_CORES (all,
# per worker), SPARK_WORKER_MEMORY (4g, per worker). Workers inherit this script's
# environment, and so do their executors: leave PYTHONPATH out of it unless
# executors should import from there. On a real cluster run the worker command on
# every worker machine, pointing at the master's URL; traces must then live on
# storage every machine sees at the same path.
set -euo pipefail

cmd=${1:?usage: spark-standalone.sh start|stop [STATE_DIR]}
state=${2:-${TMPDIR:-/tmp}/dd_etl-spark-standalone}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$here/.venv/bin/python}
host=${SPARK_MASTER_HOST:-127.0.0.1}
port=${SPARK_MASTER_PORT:-7077}
workers=${SPARK_WORKER_INSTANCES:-1}
url="spark://$host:$port"

# wait_for LOG PIDFILE PATTERN: until LOG says PATTERN (true), its process exits or
# a minute passes (false).
wait_for() {
  for _ in $(seq 1 120); do
    grep -q "$3" "$1" 2>/dev/null && return 0
    kill -0 "$(cat "$2")" 2>/dev/null || return 1
    sleep 0.5
  done
  grep -q "$3" "$1" 2>/dev/null
}

case "$cmd" in
  start)
    case "$workers" in
      '' | *[!0-9]* | 0) echo "SPARK_WORKER_INSTANCES must be a positive number" >&2; exit 2 ;;
    esac
    export SPARK_HOME=${SPARK_HOME:-$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}
    launcher=$SPARK_HOME/bin/spark-class
    mkdir -p "$state"
    nohup "$launcher" org.apache.spark.deploy.master.Master \
      --host "$host" --port "$port" --webui-port 0 >"$state/master.log" 2>&1 &
    echo $! >"$state/master.pid"
    wait_for "$state/master.log" "$state/master.pid" "I have been elected leader" || {
      cat "$state/master.log" >&2
      echo "master did not start; see $state/master.log" >&2
      exit 1
    }
    for i in $(seq 1 "$workers"); do
      nohup "$launcher" org.apache.spark.deploy.worker.Worker \
        --host "$host" --webui-port 0 --memory "${SPARK_WORKER_MEMORY:-4g}" \
        ${SPARK_WORKER_CORES:+--cores "$SPARK_WORKER_CORES"} \
        --work-dir "$state/work-$i" "$url" >"$state/worker-$i.log" 2>&1 &
      echo $! >"$state/worker-$i.pid"
    done
    for i in $(seq 1 "$workers"); do
      wait_for "$state/worker-$i.log" "$state/worker-$i.pid" "Successfully registered with master" || {
        echo "worker $i did not register; see $state/worker-$i.log" >&2
        exit 1
      }
    done
    echo "$url"
    ;;
  stop)
    # workers first (each ends its executors), then the master; wait for them to go
    pids=()
    for file in "$state"/worker*.pid "$state/master.pid"; do
      [ -f "$file" ] || continue
      pid=$(cat "$file")
      kill "$pid" 2>/dev/null && pids+=("$pid")
      rm -f "$file"
    done
    for pid in ${pids[@]+"${pids[@]}"}; do
      for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
      done
      kill -9 "$pid" 2>/dev/null || true
    done
    ;;
  *)
    echo "unknown command: $cmd" >&2
    exit 2
    ;;
esac
