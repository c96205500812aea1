"""Applications the multi-host tests submit (plain files: `ember submit` runs them as a
user's app). Each writes what it observed to a JSON file named by its first argument, so
the test reads results and side effects from the shared file system."""
WORDCOUNT = """
    import json, os, sys, time
    from operator import add
    from ember import SparkContext
    from ember.scheduler import listener as L

    out, text = sys.argv[1], sys.argv[2]
    remote, hosts = [], set()

    class Rec:
        def on_event(self, e):
            if isinstance(e, L.TaskEnd):
                remote.append(e.metrics.get("shuffleRemoteBytesRead", 0))

    sc = SparkContext(appName="lab-wordcount")
    sc._bus.add_sync(Rec())
    want = int(os.environ.get("LAB_EXECUTORS", "3"))
    deadline = time.time() + 60
    while len(sc._backend.executors) < want and time.time() < deadline:
        time.sleep(0.1)
    counts = sorted(sc.textFile(text, 6).flatMap(str.split).map(lambda w: (w, 1))
                    .reduceByKey(add, 6).collect())
    pairs = sc.parallelize([(i * 7919 % 1000, i) for i in range(3000)], 6)
    ordered = [k for k, _ in pairs.sortByKey(numPartitions=3).collect()]
    hosts = sorted({d.address.host for d in sc._backend.executors.values()})
    sc.stop()
    with open(out + ".tmp", "w") as f:
        json.dump({"counts": counts, "sorted": ordered, "remote": sum(remote),
                   "hosts": hosts}, f)
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
