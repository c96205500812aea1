#!/usr/bin/env bash
# The main job: a local standalone cluster (a master and two workers on 127.0.0.1), the
# wordcount example submitted in cluster deploy mode with its output followed, the driver's
# final status, where the UIs are; the cluster is stopped on exit, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
EMBER="${EMBER:-.venv/bin/ember}"
RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ember-demo.XXXXXX")"
export EMBER_LOG_DIR="$RUN_DIR/logs" EMBER_PID_DIR="$RUN_DIR/pids"
export SPARK_WORKER_INSTANCES=2 SPARK_WORKER_DIR="$RUN_DIR/work"
PORT="${EMBER_DEMO_PORT:-7077}" UI_PORT="${EMBER_DEMO_UI_PORT:-8080}"
MASTER="spark://127.0.0.1:$PORT"

stop_cluster() {
  "$EMBER" stop-worker >/dev/null 2>&1 || true
  "$EMBER" stop-master >/dev/null 2>&1 || true
  rm -rf "$RUN_DIR"
}
trap stop_cluster EXIT

"$EMBER" start-master --host 127.0.0.1 --port "$PORT" --webui-port "$UI_PORT"
"$EMBER" start-worker "$MASTER" --host 127.0.0.1 --cores 2 --memory 2g

echo "== submitting examples/wordcount.py in cluster deploy mode (--follow) =="
OUT="$RUN_DIR/submit.out"
set +e
"$EMBER" submit --master "$MASTER" --deploy-mode cluster --follow \
  examples/wordcount.py "$PWD/examples/data/words.txt" | tee "$OUT"
RC=${PIPESTATUS[0]}
set -e
DRIVER_ID="$(head -n 1 "$OUT")"
echo "== driver $DRIVER_ID exited with code $RC; its status: =="
"$EMBER" submit --master "$MASTER" --status "$DRIVER_ID"
echo "== master UI: http://127.0.0.1:$UI_PORT (JSON: http://127.0.0.1:$UI_PORT/json) =="
exit "$RC"
