#!/usr/bin/env bash
# Start or stop a Spark standalone cluster (one master, one worker) from the Spark
# that pyspark ships, for running dd_etl jobs on a cluster instead of local[*].
#
#   infra/spark-standalone.sh start [STATE_DIR]   # prints the master URL
#   infra/spark-standalone.sh stop  [STATE_DIR]
#
# Settings: SPARK_MASTER_HOST (default 127.0.0.1), SPARK_MASTER_PORT (7077),
# SPARK_WORKER_CORES (all), SPARK_WORKER_MEMORY (4g). On a real cluster run the
# worker command on every worker machine, pointing at the master's URL; traces
# must then live on storage every machine sees at the same path.
set -euo pipefail

cmd=${1:?usage: spark-standalone.sh start|stop [STATE_DIR]}
state=${2:-${TMPDIR:-/tmp}/dd_etl-spark-standalone}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$here/.venv/bin/python}
export SPARK_HOME=${SPARK_HOME:-$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}
spark_class=$SPARK_HOME/bin/spark-class
host=${SPARK_MASTER_HOST:-127.0.0.1}
port=${SPARK_MASTER_PORT:-7077}
url="spark://$host:$port"

case "$cmd" in
  start)
    mkdir -p "$state"
    nohup "$spark_class" org.apache.spark.deploy.master.Master \
      --host "$host" --port "$port" --webui-port 0 >"$state/master.log" 2>&1 &
    echo $! >"$state/master.pid"
    for _ in $(seq 1 60); do
      grep -q "I have been elected leader" "$state/master.log" && break
      kill -0 "$(cat "$state/master.pid")" 2>/dev/null || { cat "$state/master.log" >&2; exit 1; }
      sleep 1
    done
    nohup "$spark_class" org.apache.spark.deploy.worker.Worker \
      --webui-port 0 --memory "${SPARK_WORKER_MEMORY:-4g}" \
      ${SPARK_WORKER_CORES:+--cores "$SPARK_WORKER_CORES"} \
      --work-dir "$state/work" "$url" >"$state/worker.log" 2>&1 &
    echo $! >"$state/worker.pid"
    for _ in $(seq 1 60); do
      grep -q "Successfully registered with master" "$state/worker.log" && break
      kill -0 "$(cat "$state/worker.pid")" 2>/dev/null || break
      sleep 1
    done
    grep -q "Successfully registered with master" "$state/worker.log" || {
      echo "worker did not register; see $state/worker.log" >&2
      exit 1
    }
    echo "$url"
    ;;
  stop)
    for role in worker master; do
      if [ -f "$state/$role.pid" ]; then
        kill "$(cat "$state/$role.pid")" 2>/dev/null || true
        rm -f "$state/$role.pid"
      fi
    done
    ;;
  *)
    echo "unknown command: $cmd" >&2
    exit 2
    ;;
esac
