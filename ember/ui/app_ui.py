"""The application UI: Spark's driver web UI (port 4040) over an AppStatusStore.

Pages are pure functions of a store: `render_page(store, path, query, prefix)` returns
(status, HTML) for /jobs/, /jobs/job/?id=N, /stages/, /stages/stage/?id=N&attempt=M,
/storage/, /storage/rdd/?id=N, /executors/ and /environment/, with every link under `prefix`
- so the history server serves a replayed application's pages from the same code under
`/history/<appId>`, through `make_routes(provider, prefix)`. Every string that came from a
user or a peer (app name, descriptions, call sites, RDD names, errors, configuration) is
escaped by ember.web.pages's builders; an unknown id is a 404 page.

While the application runs, a page re-fetches itself every second and swaps in its
`#content` element (a few lines of inline JS, no library), so numbers move without reloads.

`prometheus_metrics(store)` is the driver's `/metrics/prometheus`. The live server that
serves all this is ember.ui.spark_ui.SparkUI.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from ember.ui.api import StoreProvider
from ember.ui.status_store import AppStatusStore
from ember.util.units import bytes_to_string
from ember.web.pages import (Html, PrometheusText, esc, format_date, format_duration, link,
                             table, url_with_query)

PAGES = ("/jobs/", "/jobs/job/", "/stages/", "/stages/stage/", "/storage/", "/storage/rdd/",
         "/executors/", "/environment/")
TABS = ("jobs", "stages", "storage", "executors", "environment")
TASK_PAGE_SIZE = 100

_CSS = """body{font-family:-apple-system,"Helvetica Neue",Arial,sans-serif;font-size:14px;
margin:0;color:#222}
nav{background:#f3f3f3;border-bottom:1px solid #ddd;padding:8px 20px}
nav a{margin-right:16px;text-decoration:none;color:#0366d6}nav a.active{font-weight:bold;color:#222}
nav span.app{float:right;color:#555}
#content{margin:0 20px 20px}h3{margin:16px 0 8px}h4{margin:20px 0 6px}
ul.summary{list-style:none;padding:0;margin:0}ul.summary li{margin:2px 0}
table{border-collapse:collapse;width:100%;margin-bottom:8px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}
pre{white-space:pre-wrap;word-break:break-all;margin:0;font-size:12px}
.progress{position:relative;height:18px;min-width:140px;background:#eee;border-radius:3px;
overflow:hidden}.progress span{position:absolute;width:100%;text-align:center;font-size:12px;
line-height:18px}.progress .bar{float:left;height:100%}.bar.done{background:#9fd89f}
.bar.running{background:#9cc3ee}"""

# Re-fetch this page every second while the app runs and swap in the new #content (the
# server's escaped HTML); stops once the fetched page says the app is no longer live.
_LIVE_JS = """<script>
(function(){
  function tick(){
    if (document.hidden) { setTimeout(tick, 1000); return; }
    fetch(location.href, {cache: "no-store"}).then(function(r){ return r.text(); })
      .then(function(text){
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("content"), cur = document.getElementById("content");
        if (fresh && cur) cur.innerHTML = fresh.innerHTML;
        if (doc.body.getAttribute("data-live") === "1") setTimeout(tick, 1000);
      }).catch(function(){ setTimeout(tick, 5000); });
  }
  if (document.body.getAttribute("data-live") === "1") setTimeout(tick, 1000);
})();
</script>"""


# --- formatting -----------------------------------------------------------------------------
def _date(epoch_ms: int | None) -> str:
    return format_date(epoch_ms) if epoch_ms and epoch_ms > 0 else ""


def _duration(start: int | None, end: int | None, now: int) -> str:
    return format_duration((end or now) - start) if start else ""


def _tasks_progress(done: int, total: int, failed: int = 0, killed: int = 0,
                    skipped: int = 0, running: int = 0) -> Html:
    """Spark's progress bar: succeeded (green) and running (blue) shares of `total`, with
    "done/total (n running, n failed, ...)" written over it."""
    extras = [f"{n} {what}" for n, what in ((running, "running"), (failed, "failed"),
                                            (killed, "killed"), (skipped, "skipped")) if n]
    text = f"{done}/{total}" + (f" ({', '.join(extras)})" if extras else "")
    done_pct = min(100.0, 100.0 * done / total) if total > 0 else 0.0
    run_pct = min(100.0 - done_pct, 100.0 * running / total) if total > 0 else 0.0
    return Html(f'<div class="progress"><span>{esc(text)}</span>'
                f'<div class="bar done" style="width:{done_pct:.1f}%"></div>'
                f'<div class="bar running" style="width:{run_pct:.1f}%"></div></div>')


def _ul(items: list[tuple[str, Any]]) -> Html:
    return Html('<ul class="summary">' + "".join(
        f"<li><strong>{esc(k)}:</strong> {esc(v)}</li>" for k, v in items) + "</ul>")


def _section(title: str, headers: list[str], rows: list[list[Any]], anchor: str) -> Html:
    return Html(f"<h4>{esc(title)} ({len(rows)})</h4>" + table(headers, rows, anchor))


def _now() -> int:
    return int(time.time() * 1000)


# --- layout ---------------------------------------------------------------------------------
def layout(store: AppStatusStore, prefix: str, tab: str, title: str, content: str) -> str:
    """A whole page: the tab bar (every link under prefix), the escaped title, and content."""
    tabs = "".join(
        f'<a href="{esc(prefix)}/{t}/"{" class=active" if t == tab else ""}>{name}</a>'
        for t, name in (("jobs", "Jobs"), ("stages", "Stages"), ("storage", "Storage"),
                        ("environment", "Environment"), ("executors", "Executors")))
    app_name = store.app["name"]
    live = "0" if store.completed else "1"
    return (f'<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n'
            f"<title>{esc(app_name)} - {esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n"
            f'<body data-live="{live}">\n<nav>{tabs}<span class="app">{esc(app_name)} '
            f"application UI</span></nav>\n"
            f'<div id="content">\n<h3>{esc(title)}</h3>\n{content}\n</div>\n{_LIVE_JS}\n'
            f"</body>\n</html>\n")


def not_found_page(store: AppStatusStore, prefix: str, message: str) -> tuple[int, str]:
    return 404, layout(store, prefix, "", "Not Found", f"<p>{esc(message)}</p>")


# --- pages ----------------------------------------------------------------------------------
def _job_rows(store: AppStatusStore, jobs: list[dict[str, Any]], prefix: str, now: int
              ) -> list[list[Any]]:
    rows = []
    for j in jobs:
        href = url_with_query(f"{prefix}/jobs/job/", id=j["jobId"])
        desc = Html((f"{esc(j['description'])}<br>" if j["description"] else "") +
                    link(href, j["name"]))
        group = f" ({j['jobGroup']})" if j["jobGroup"] else ""
        rows.append([Html(f"{link(href, j['jobId'])}{esc(group)}"), desc,
                     _date(j["submissionTime"]),
                     _duration(j["submissionTime"], j["completionTime"], now),
                     _tasks_progress(j["numCompletedStages"],
                                     len(j["stageIds"]) - j["numSkippedStages"],
                                     j["numFailedStages"], skipped=j["numSkippedStages"]),
                     _tasks_progress(j["numCompletedIndices"],
                                     j["numTasks"] - j["numSkippedTasks"], j["numFailedTasks"],
                                     j["numKilledTasks"], j["numSkippedTasks"],
                                     j["numActiveTasks"])])
    return rows


_JOB_HEADERS = ["Job Id", "Description", "Submitted", "Duration", "Stages: Succeeded/Total",
                "Tasks (for all stages): Succeeded/Total"]


def jobs_page(store: AppStatusStore, query: Mapping[str, str], prefix: str) -> tuple[int, str]:
    now = _now()
    jobs = store.jobs()
    app = store.application_info()["attempts"][0]
    by = {s: [j for j in jobs if j["status"] == s] for s in ("RUNNING", "SUCCEEDED", "FAILED")}
    start = app["startTime"]
    summary = _ul([("User", app["sparkUser"]),
                   ("Started at", _date(start)),
                   ("Total Uptime", format_duration(((app["endTime"] if app["completed"]
                                                      else now) - start) if start else 0)),
                   ("Active Jobs", len(by["RUNNING"])), ("Completed Jobs", len(by["SUCCEEDED"])),
                   ("Failed Jobs", len(by["FAILED"]))])
    parts = [summary]
    for status, title, anchor in (("RUNNING", "Active Jobs", "active"),
                                  ("SUCCEEDED", "Completed Jobs", "completed"),
                                  ("FAILED", "Failed Jobs", "failed")):
        if by[status]:
            parts.append(_section(title, _JOB_HEADERS, _job_rows(store, by[status], prefix, now),
                                  f"{anchor}-jobs"))
    return 200, layout(store, prefix, "jobs", "Spark Jobs", "\n".join(parts))


def _stage_rows(stages: list[dict[str, Any]], prefix: str, now: int, failed: bool = False
                ) -> list[list[Any]]:
    rows = []
    for s in stages:
        href = url_with_query(f"{prefix}/stages/stage/", id=s["stageId"], attempt=s["attemptId"])
        desc = Html((f"{esc(s['description'])}<br>" if s.get("description") else "") +
                    link(href, s["name"]))
        row = [s["stageId"] if not s["attemptId"] else f"{s['stageId']} (retry {s['attemptId']})",
               s["schedulingPool"], desc, _date(s["submissionTime"]),
               _duration(s["submissionTime"], s["completionTime"], now)
               if s["status"] not in ("PENDING", "SKIPPED") else "",
               _tasks_progress(s["numCompleteTasks"], s["numTasks"], s["numFailedTasks"],
                               s["numKilledTasks"], running=s["numActiveTasks"]),
               bytes_to_string(s["shuffleReadBytes"]) if s["shuffleReadBytes"] else "",
               bytes_to_string(s["shuffleWriteBytes"]) if s["shuffleWriteBytes"] else ""]
        if failed:
            row.append(Html(f"<pre>{esc(s['failureReason'] or '')}</pre>"))
        rows.append(row)
    return rows


_STAGE_HEADERS = ["Stage Id", "Pool Name", "Description", "Submitted", "Duration",
                  "Tasks: Succeeded/Total", "Shuffle Read", "Shuffle Write"]
_STAGE_SECTIONS = (("ACTIVE", "Active Stages", "active"), ("PENDING", "Pending Stages", "pending"),
                   ("COMPLETE", "Completed Stages", "completed"),
                   ("SKIPPED", "Skipped Stages", "skipped"), ("FAILED", "Failed Stages", "failed"))


def _stage_sections(stages: list[dict[str, Any]], prefix: str, now: int) -> list[Html]:
    parts = []
    for status, title, anchor in _STAGE_SECTIONS:
        found = [s for s in stages if s["status"] == status]
        if found:
            failed = status == "FAILED"
            headers = _STAGE_HEADERS + (["Failure Reason"] if failed else [])
            parts.append(_section(title, headers, _stage_rows(found, prefix, now, failed),
                                  f"{anchor}-stages"))
    return parts


def job_page(store: AppStatusStore, query: Mapping[str, str], prefix: str) -> tuple[int, str]:
    job_id = _query_int(query, "id")
    job = store.job(job_id) if job_id is not None else None
    if job is None:
        return not_found_page(store, prefix, f"No information to display for job "
                                             f"{query.get('id', '')}")
    now = _now()
    items: list[tuple[str, Any]] = [("Status", job["status"]),
                                    ("Submitted", _date(job["submissionTime"])),
                                    ("Duration", _duration(job["submissionTime"],
                                                           job["completionTime"], now))]
    if job["jobGroup"]:
        items.append(("Job Group", job["jobGroup"]))
    if job["description"]:
        items.append(("Description", job["description"]))
    ids = set(job["stageIds"])
    stages = [s for s in store.stages() if s["stageId"] in ids]
    parts = [_ul(items)]
    if job["status"] == "FAILED":
        failure = next((s["failureReason"] for s in stages if s.get("failureReason")), "")
        if failure:
            parts.append(Html(f"<h4>Failure</h4><pre>{esc(failure)}</pre>"))
    parts += _stage_sections(stages, prefix, now)
    return 200, layout(store, prefix, "jobs", f"Details for Job {job_id}", "\n".join(parts))


def stages_page(store: AppStatusStore, query: Mapping[str, str], prefix: str
                ) -> tuple[int, str]:
    parts = _stage_sections(store.stages(), prefix, _now())
    return 200, layout(store, prefix, "stages", "Stages for All Jobs",
                       "\n".join(parts) or "<p>No stages yet.</p>")


def stage_page(store: AppStatusStore, query: Mapping[str, str], prefix: str
               ) -> tuple[int, str]:
    stage_id, attempt = _query_int(query, "id"), _query_int(query, "attempt") or 0
    stage = store.stage(stage_id, attempt, details=False) if stage_id is not None else None
    if stage is None:
        return not_found_page(store, prefix, f"No information to display for Stage "
                                             f"{query.get('id', '')} (Attempt {attempt})")
    localities = store.locality_summary(stage_id, attempt)
    summary = _ul([
        ("Status", stage["status"]),
        ("Total Time Across All Tasks", format_duration(stage["executorRunTime"])),
        ("Locality Level Summary", "; ".join(f"{k}: {v}" for k, v in sorted(localities.items()))),
        ("Shuffle Read", bytes_to_string(stage["shuffleReadBytes"])),
        ("Shuffle Write", f"{bytes_to_string(stage['shuffleWriteBytes'])} / "
                          f"{stage['shuffleWriteRecords']}"),
        ("Spill (Disk)", bytes_to_string(stage["diskBytesSpilled"]))])
    size = min(max(1, _query_int(query, "pageSize") or TASK_PAGE_SIZE), 10_000)
    total = store.task_count(stage_id, attempt)
    pages = max(1, -(-total // size))
    page = min(max(1, _query_int(query, "page") or 1), pages)
    tasks = store.tasks(stage_id, attempt, (page - 1) * size, size, "index") or []
    exec_rows = [[eid, format_duration(es["taskTime"]),
                  es["succeededTasks"] + es["failedTasks"] + es["killedTasks"],
                  es["failedTasks"], es["killedTasks"], es["succeededTasks"],
                  bytes_to_string(es["shuffleRead"]), bytes_to_string(es["shuffleWrite"]),
                  es["shuffleWriteRecords"], bytes_to_string(es["diskBytesSpilled"])]
                 for eid, es in store.executor_summary(stage_id, attempt).items()]
    task_rows = []
    for t in tasks:
        m = t.get("taskMetrics") or {}
        read = m.get("shuffleReadMetrics") or {}
        write = m.get("shuffleWriteMetrics") or {}
        task_rows.append([t["index"], t["taskId"], t["attempt"], t["status"], t["taskLocality"],
                          t["executorId"], t["host"], _date(t["launchTime"]),
                          format_duration(t["duration"]),
                          bytes_to_string(read.get("localBytesRead", 0) +
                                          read.get("remoteBytesRead", 0)) if read else "",
                          f"{bytes_to_string(write['bytesWritten'])} / {write['recordsWritten']}"
                          if write.get("bytesWritten") else "",
                          bytes_to_string(m["diskBytesSpilled"]) if m.get("diskBytesSpilled")
                          else "",
                          Html(f"<pre>{esc(t.get('errorMessage') or '')}</pre>")])
    base = f"{prefix}/stages/stage/"
    pager = Html("<p>" + " ".join(
        (str(p) if p == page else
         link(url_with_query(base, id=stage_id, attempt=attempt, page=p, pageSize=size), p))
        for p in range(1, pages + 1) if p in (1, pages) or abs(p - page) <= 3) +
        f" &middot; {total} tasks</p>") if total else Html("")
    parts = [summary,
             _section("Aggregated Metrics by Executor",
                      ["Executor ID", "Task Time", "Total Tasks", "Failed Tasks", "Killed Tasks",
                       "Succeeded Tasks", "Shuffle Read Size", "Shuffle Write Size",
                       "Shuffle Write Records", "Spill (Disk)"], exec_rows, "executor-summary"),
             Html(f"<h4>Tasks ({total})</h4>"), pager,
             table(["Index", "Task ID", "Attempt", "Status", "Locality Level", "Executor ID",
                    "Host", "Launch Time", "Duration", "Shuffle Read Size",
                    "Shuffle Write Size / Records", "Spill (Disk)", "Errors"], task_rows,
                   "task-table")]
    title = f"Details for Stage {stage_id} (Attempt {attempt})"
    return 200, layout(store, prefix, "stages", title, "\n".join(parts))


def storage_page(store: AppStatusStore, query: Mapping[str, str], prefix: str
                 ) -> tuple[int, str]:
    rows = [[link(url_with_query(f"{prefix}/storage/rdd/", id=r["id"]), r["id"]),
             link(url_with_query(f"{prefix}/storage/rdd/", id=r["id"]), r["name"]),
             r["storageLevel"], r["numCachedPartitions"],
             f"{100 * r['numCachedPartitions'] / max(1, r['numPartitions']):.0f}%",
             bytes_to_string(r["memoryUsed"]), bytes_to_string(r["diskUsed"])]
            for r in store.rdds()]
    content = _section("RDDs", ["ID", "RDD Name", "Storage Level", "Cached Partitions",
                                "Fraction Cached", "Size in Memory", "Size on Disk"],
                       rows, "storage-by-rdd-table")
    return 200, layout(store, prefix, "storage", "Storage", content)


def rdd_page(store: AppStatusStore, query: Mapping[str, str], prefix: str) -> tuple[int, str]:
    rdd_id = _query_int(query, "id")
    rdd = store.rdd(rdd_id) if rdd_id is not None else None
    if rdd is None:
        return not_found_page(store, prefix, f"No information to display for RDD "
                                             f"{query.get('id', '')}")
    summary = _ul([("Storage Level", rdd["storageLevel"]),
                   ("Cached Partitions", rdd["numCachedPartitions"]),
                   ("Total Partitions", rdd["numPartitions"]),
                   ("Memory Size", bytes_to_string(rdd["memoryUsed"])),
                   ("Disk Size", bytes_to_string(rdd["diskUsed"]))])
    dist = [[d["address"], bytes_to_string(d["memoryUsed"]), bytes_to_string(d["diskUsed"])]
            for d in rdd["dataDistribution"]]
    parts = [[p["blockName"], p["storageLevel"], bytes_to_string(p["memoryUsed"]),
              bytes_to_string(p["diskUsed"]), ", ".join(p["executors"])]
             for p in rdd["partitions"]]
    content = "\n".join([summary,
                         _section("Data Distribution on Executors",
                                  ["Host", "Memory Usage", "Disk Usage"], dist, "rdd-dist"),
                         _section("Partitions", ["Block Name", "Storage Level",
                                                 "Size in Memory", "Size on Disk", "Executors"],
                                  parts, "rdd-partitions")])
    return 200, layout(store, prefix, "storage", f"RDD Storage Info for {rdd['name']}", content)


def _executor_status(e: Mapping[str, Any]) -> str:
    """Spark's executors page: Excluded, Active (with the stages excluding it), Dead."""
    if not e["isActive"]:
        return "Dead"
    if e["isExcluded"]:
        return "Excluded"
    stages = e["excludedInStages"]
    if stages:
        return f"Active (Excluded in Stages: [{', '.join(map(str, stages))}])"
    return "Active"


def executors_page(store: AppStatusStore, query: Mapping[str, str], prefix: str
                   ) -> tuple[int, str]:
    rows = []
    for e in store.executors(active_only=False):
        logs = Html(" ".join(link(url, kind) for kind, url in sorted(e["executorLogs"].items())))
        rows.append([e["id"], e["hostPort"], _executor_status(e),
                     e["rddBlocks"], bytes_to_string(e["memoryUsed"]),
                     bytes_to_string(e["diskUsed"]), e["totalCores"], e["activeTasks"],
                     e["failedTasks"], e["completedTasks"], e["totalTasks"],
                     format_duration(e["totalDuration"]),
                     bytes_to_string(e["totalShuffleRead"]),
                     bytes_to_string(e["totalShuffleWrite"]), logs, _date(e["addTime"]),
                     e["removeReason"] or ""])
    headers = ["Executor ID", "Address", "Status", "RDD Blocks", "Storage Memory", "Disk Used",
               "Cores", "Active Tasks", "Failed Tasks", "Complete Tasks", "Total Tasks",
               "Task Time", "Shuffle Read", "Shuffle Write", "Logs", "Add Time",
               "Remove Reason"]
    return 200, layout(store, prefix, "executors", "Executors",
                       _section("Executors", headers, rows, "active-executors-table"))


def environment_page(store: AppStatusStore, query: Mapping[str, str], prefix: str
                     ) -> tuple[int, str]:
    env = store.environment
    parts = [_section(title, ["Name", "Value"], [list(kv) for kv in env.get(title, [])],
                      title.lower().replace(" ", "-"))
             for title in ("JVM Information", "Spark Properties", "Hadoop Properties",
                           "System Properties", "Metrics Properties", "Classpath Entries")
             if env.get(title) or title == "Spark Properties"]
    return 200, layout(store, prefix, "environment", "Environment", "\n".join(parts))


def _query_int(query: Mapping[str, str], name: str) -> int | None:
    v = query.get(name)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


_RENDERERS: dict[str, Callable[[AppStatusStore, Mapping[str, str], str], tuple[int, str]]] = {
    "/jobs/": jobs_page, "/jobs/job/": job_page, "/stages/": stages_page,
    "/stages/stage/": stage_page, "/storage/": storage_page, "/storage/rdd/": rdd_page,
    "/executors/": executors_page, "/environment/": environment_page}


def render_page(store: AppStatusStore, path: str, query: Mapping[str, str], prefix: str = ""
                ) -> tuple[int, str]:
    """(status, HTML) of one UI page; `path` is one of PAGES, links are under `prefix`."""
    renderer = _RENDERERS.get(path if path.endswith("/") else path + "/")
    if renderer is None:
        return not_found_page(store, prefix, f"Unknown page {path}")
    return renderer(store, query, prefix)


# --- Prometheus -----------------------------------------------------------------------------
def prometheus_metrics(store: AppStatusStore) -> PrometheusText:
    """The driver's `/metrics/prometheus`: gauges of what runs now, counters since start."""
    s = store.summary()
    labels = {"application_id": store.app["id"], "application_name": store.app["name"]}

    def one(value: int | float) -> list[tuple[Mapping[str, Any], int | float]]:
        return [(labels, value)]
    out = PrometheusText()
    for name, kind, help_text, value in (
            ("ember_driver_jobs_active", "gauge", "Jobs running now.", s["jobs_active"]),
            ("ember_driver_jobs_succeeded_total", "counter", "Jobs that succeeded.",
             s["jobs_succeeded"]),
            ("ember_driver_jobs_failed_total", "counter", "Jobs that failed.", s["jobs_failed"]),
            ("ember_driver_stages_active", "gauge", "Stages running now.", s["stages_active"]),
            ("ember_driver_stages_completed_total", "counter", "Stage attempts completed.",
             s["stages_completed"]),
            ("ember_driver_stages_failed_total", "counter", "Stage attempts failed.",
             s["stages_failed"]),
            ("ember_driver_tasks_active", "gauge", "Tasks running now.", s["tasks_active"]),
            ("ember_driver_tasks_completed_total", "counter", "Tasks that succeeded.",
             s["tasks_completed"]),
            ("ember_driver_tasks_failed_total", "counter", "Tasks that failed.",
             s["tasks_failed"]),
            ("ember_driver_tasks_killed_total", "counter", "Tasks that were killed.",
             s["tasks_killed"]),
            ("ember_driver_speculative_tasks_submitted_total", "counter",
             "Running tasks that were given a speculative copy.",
             s["speculative_tasks_submitted"]),
            ("ember_driver_executors_excluded_total", "counter",
             "Executors excluded for the application after task failures.",
             s["executors_excluded"]),
            ("ember_driver_nodes_excluded_total", "counter",
             "Nodes excluded for the application after task failures.", s["nodes_excluded"]),
            ("ember_driver_executors_excluded", "gauge", "Executors excluded now.",
             s["executors_excluded_now"]),
            ("ember_driver_executors_active", "gauge", "Executors registered now.",
             s["executors_active"]),
            ("ember_driver_executor_cores", "gauge", "Cores of the registered executors.",
             s["cores"]),
            ("ember_driver_cached_rdds", "gauge", "RDDs with cached partitions.",
             s["cached_rdds"]),
            ("ember_driver_shuffle_read_bytes_total", "counter", "Shuffle bytes read by tasks.",
             s["shuffle_read_bytes"]),
            ("ember_driver_shuffle_write_bytes_total", "counter",
             "Shuffle bytes written by tasks.", s["shuffle_write_bytes"]),
            ("ember_driver_disk_bytes_spilled_total", "counter", "Bytes spilled to disk.",
             s["disk_bytes_spilled"]),
            ("ember_driver_executor_run_time_seconds_total", "counter",
             "Time tasks spent running on executors.", s["executor_run_time_ms"] / 1000)):
        out.add(name, kind, help_text, one(value))
    out.add("ember_driver_executors_added_total", "counter", "Executors that registered.",
            one(s["executors_added"]))
    out.add("ember_driver_executors_removed_total", "counter",
            "Executors removed, by cause (idle: dynamic allocation; decommission; lost).",
            [({**labels, "cause": cause}, n)
             for cause, n in sorted(s["executors_removed"].items())] or one(0))
    return out


# --- aiohttp glue ---------------------------------------------------------------------------
def make_routes(provider: StoreProvider, prefix: str = "") -> list[Any]:
    """aiohttp routes of the pages under `prefix`, which may hold `{app_id}` and
    `{attempt_id}` placeholders (history server: `/history/{app_id}`); the store comes from
    `provider.store(app_id, attempt_id)` (both None for the live UI's one app). `prefix/`
    and the tabs without their trailing slash redirect, as Spark's do."""
    from aiohttp import web
    from ember.web.pages import html_response, not_found

    def page_handler(page: str) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.StreamResponse:
            info = request.match_info
            store = provider.store(info.get("app_id"), info.get("attempt_id"))
            if store is None:
                return not_found(f"Application {info.get('app_id')} not found.")
            base = request.path[:len(request.path) - len(page)]
            status, body = render_page(store, page, request.query, base)
            return html_response(body, status)
        return handle

    async def redirect(request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/")
        raise web.HTTPFound(path + "/" if path.rsplit("/", 1)[-1] in TABS else path + "/jobs/")

    routes = [web.get(prefix + page, page_handler(page)) for page in PAGES]
    routes += [web.get(f"{prefix}/{tab}", redirect) for tab in TABS]
    routes.append(web.get(prefix + "/", redirect))
    if prefix:
        routes.append(web.get(prefix, redirect))
    return routes

