"""Applications the multi-host tests and the chaos run submit (plain files: `ember submit`
runs them as a user's app). Each writes what it observed to a file named by its first
argument, so the test reads results and side effects from the shared file system."""
from __future__ import annotations

import os
WORDCOUNT = """
    import json, os, sys, time
    from operator import add
    from ember import SparkContext
    from ember.scheduler import listener as sl

    out, text = sys.argv[1], sys.argv[2]
    remote, failures = [], []

    class Rec:
        def on_event(self, e):
            if isinstance(e, sl.TaskEnd):
                remote.append(e.metrics.get("shuffleRemoteBytesRead", 0))
                if e.reason not in (None, "Success") and str(e.reason) != "Success":
                    failures.append(str(e.reason))

    sc = SparkContext(appName="lab-wordcount")
    sc.runtime.bus.add_sync(Rec())
    want = int(os.environ.get("LAB_EXECUTORS", "3"))
    deadline = time.time() + 60
    while len(sc.runtime.scheduler_backend.executors) < want and time.time() < deadline:
        time.sleep(0.1)
    go = os.environ.get("LAB_GO")        # wait until the test has set up its fault
    if go:
        open(go + ".ready", "w").close()
        deadline = time.time() + 60
        while not os.path.exists(go) and time.time() < deadline:
            time.sleep(0.1)
    counts = sorted(sc.textFile(text, 6).flatMap(str.split).map(lambda w: (w, 1))
                    .reduceByKey(add, 6).collect())
    pairs = sc.parallelize([(i * 7919 % 1000, i) for i in range(3000)], 6)
    ordered = [k for k, _ in pairs.sortByKey(numPartitions=3).collect()]
    hosts = sorted({d.address.host for d in sc.runtime.scheduler_backend.executors.values()})
    sc.stop()
    with open(out + ".tmp", "w") as f:
        json.dump({"counts": counts, "sorted": ordered, "remote": sum(remote),
                   "hosts": hosts, "failures": failures}, f)
    os.rename(out + ".tmp", out)
"""


def words_file(path: str) -> str:
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    with open(path, "w") as f:
        f.write("\n".join(" ".join(words[(i * j) % 5] for j in range(7)) for i in range(3000)))
    return path


def local_expected(text: str) -> dict:
    """The same computation in local mode: what every cluster run must equal."""
    from operator import add

    from ember import SparkContext
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    with SparkContext("local[2]", "lab-expected") as sc:
        counts = sorted(sc.textFile(text, 6).flatMap(str.split).map(lambda w: (w, 1))
                        .reduceByKey(add, 6).collect())
        pairs = sc.parallelize([(i * 7919 % 1000, i) for i in range(3000)], 6)
        ordered = [k for k, _ in pairs.sortByKey(numPartitions=3).collect()]
    return {"counts": [list(c) for c in counts], "sorted": ordered}


SLOW_SHUFFLE = """
    import json, os, sys, time
    from operator import add
    from ember import SparkContext

    out = sys.argv[1]
    sc = SparkContext(appName="lab-slow-shuffle")
    deadline = time.time() + 60
    while len(sc.runtime.scheduler_backend.executors) < 3 and time.time() < deadline:
        time.sleep(0.1)

    def slow(x):
        time.sleep(0.25)
        return (x % 7, x)

    open(out + ".started", "w").close()
    sums = sorted(sc.parallelize(range(240), 24).map(slow).reduceByKey(add, 6)
                  .map(lambda kv: (kv[0], kv[1] + 0)).collect())
    with open(out + ".tmp", "w") as f:
        json.dump({"sums": sums}, f)
    os.rename(out + ".tmp", out)
    deadline = time.time() + float(os.environ.get("LAB_HOLD", "0"))
    while time.time() < deadline and not os.path.exists(out + ".release"):
        time.sleep(0.1)
    sc.stop()
"""

SLOW_SHUFFLE_EXPECTED = sorted((k, sum(x for x in range(240) if x % 7 == k)) for k in range(7))

TOKEN = """
    import os, sys, time
    # A trivial driver with a side effect per run: one file per run, named by token and pid.
    out, token = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    path = os.path.join(out, f"{token}.{os.getpid()}")
    with open(path, "w") as f:
        f.write(f"start {time.time()}\\n")
        f.flush()
        end = time.time() + seconds
        while time.time() < end:
            time.sleep(0.1)
            f.write(f"beat {time.time()}\\n")
            f.flush()
        f.write(f"stop {time.time()}\\n")
"""


def runs(directory: str, token: str) -> list[list[float]]:
    """Every run of TOKEN `token`: the timestamps it wrote (start, beats, stop)."""
    out = []
    for name in sorted(os.listdir(directory)):
        if name.split(".")[0] == token:
            with open(os.path.join(directory, name)) as f:
                out.append([float(line.split()[1]) for line in f if line.strip()])
    return out


def overlap_seconds(a: list[float], b: list[float]) -> float:
    """How long two runs were both alive (first to last timestamp each wrote)."""
    return max(0.0, min(a[-1], b[-1]) - max(a[0], b[0]))
