#!/usr/bin/env bash
# The main job: a local standalone cluster (a master and two workers on 127.0.0.1) and a
# history server, the wordcount example submitted in cluster deploy mode with its output
# followed and its event log written, the driver's final status. Run in a terminal, the
# cluster then stays up, with the addresses of the master UI, the finished application in
# the history server and the driver's log page, until Enter is pressed (or 10 minutes have
# passed); without a terminal (CI, `make demo < /dev/null`) it stops at once. Everything it
# started is stopped on exit, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
EMBER="${EMBER:-.venv/bin/ember}"
PYTHON="${PYTHON:-$(dirname "$EMBER")/python}"
RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ember-demo.XXXXXX")"
export EMBER_LOG_DIR="$RUN_DIR/logs" EMBER_PID_DIR="$RUN_DIR/pids"
export SPARK_WORKER_INSTANCES=2 SPARK_WORKER_DIR="$RUN_DIR/work"
PORT="${EMBER_DEMO_PORT:-7077}" UI_PORT="${EMBER_DEMO_UI_PORT:-8080}"
HISTORY_PORT="${EMBER_DEMO_HISTORY_PORT:-18080}" REST_PORT="${EMBER_DEMO_REST_PORT:-6066}"
KEEP_SECONDS="${EMBER_DEMO_KEEP_SECONDS:-600}"
MASTER="spark://127.0.0.1:$PORT"
EVENTS="$RUN_DIR/events"
mkdir -p "$EVENTS"

stop_cluster() {
  "$EMBER" stop-history-server >/dev/null 2>&1 || true
  "$EMBER" stop-worker >/dev/null 2>&1 || true
  "$EMBER" stop-master >/dev/null 2>&1 || true
  rm -rf "$RUN_DIR"
}
trap stop_cluster EXIT

"$EMBER" start-master --host 127.0.0.1 --port "$PORT" --webui-port "$UI_PORT" \
  --conf "spark.master.rest.port=$REST_PORT" \
  --conf "spark.master.ui.historyServerUrl=http://127.0.0.1:$HISTORY_PORT"
"$EMBER" start-worker "$MASTER" --host 127.0.0.1 --cores 2 --memory 2g
"$EMBER" start-history-server --host 127.0.0.1 --port "$HISTORY_PORT" --dir "$EVENTS"

echo "== submitting examples/wordcount.py in cluster deploy mode (--follow) =="
OUT="$RUN_DIR/submit.out"
set +e
"$EMBER" submit --master "$MASTER" --deploy-mode cluster --follow \
  --conf spark.eventLog.enabled=true --conf "spark.eventLog.dir=$EVENTS" \
  examples/wordcount.py "$PWD/examples/data/words.txt" | tee "$OUT"
RC=${PIPESTATUS[0]}
set -e
DRIVER_ID="$(head -n 1 "$OUT")"
echo "== driver $DRIVER_ID exited with code $RC; its status: =="
"$EMBER" submit --master "$MASTER" --conf "spark.master.rest.port=$REST_PORT" --status "$DRIVER_ID"

if [ -t 0 ]; then
  # Where to look: the master's JSON names the application and the worker that ran the
  # driver (its UI serves the driver's log); the history server lists the finished app.
  read -r APP_ID DRIVER_LOG < <("$PYTHON" - "$UI_PORT" "$DRIVER_ID" <<'EOF'
import json, sys, urllib.request
state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json", timeout=10))
driver = next(d for d in state["activedrivers"] + state["completeddrivers"]
              if d["id"] == sys.argv[2])
worker = next(w for w in state["workers"] if w["id"] == driver["worker"])
apps = [a["id"] for a in state["completedapps"] + state["activeapps"]]
print(apps[0] if apps else "-",
      f"{worker['webuiaddress']}/logPage/?driverId={driver['id']}&logType=stdout")
EOF
  )
  for _ in $(seq 50); do   # the history server picks the log up on its next scan
    curl -sf "http://127.0.0.1:$HISTORY_PORT/api/v1/applications/$APP_ID" >/dev/null && break
    sleep 0.2
  done
  echo "== the cluster is up; open these while it is: =="
  echo "   master UI:            http://127.0.0.1:$UI_PORT  (JSON: http://127.0.0.1:$UI_PORT/json)"
  echo "   finished application: http://127.0.0.1:$HISTORY_PORT/history/$APP_ID/jobs/"
  echo "   history server:       http://127.0.0.1:$HISTORY_PORT"
  echo "   driver's log:         $DRIVER_LOG"
  echo "== press Enter to stop the cluster (it stops by itself in $((KEEP_SECONDS / 60)) minutes) =="
  read -r -t "$KEEP_SECONDS" _ || true
  echo "== stopping the cluster =="
else
  echo "== no terminal: the cluster stops now (run 'make demo' in a terminal to keep it up and browse its UIs) =="
fi
exit "$RC"
