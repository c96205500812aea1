"""A real standalone cluster: master and workers as processes, drivers and executors too."""
from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from operator import add

import psutil
import pytest

from ember import SparkConf, SparkContext
from ember.scheduler import listener as sl
from tests.cluster import ROOT, LocalCluster, _env

pytestmark = pytest.mark.timeout(180)


def _context(cluster: LocalCluster, name: str, **conf: str) -> SparkContext:
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    c = SparkConf().setMaster(cluster.url).setAppName(name)
    for k, v in conf.items():
        c.set(k.replace("_", "."), v)
    return SparkContext(conf=c)


def _wait(predicate, timeout: float = 20.0, step: float = 0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise TimeoutError("condition not met")


def test_wordcount_and_sort_match_local_mode_with_remote_shuffle_reads(cluster, tmp_path):
    text = tmp_path / "words.txt"
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    text.write_text("\n".join(" ".join(words[(i * j) % 5] for j in range(7))
                              for i in range(2000)))
    remote = []

    class Rec:
        def on_event(self, e):
            if isinstance(e, sl.TaskEnd):
                remote.append(e.metrics.get("shuffleRemoteBytesRead", 0))

    # both executors run on this host: without this, reducers read each other's files
    sc = _context(cluster, "wc-cluster", spark_shuffle_readHostLocalDisk="false")
    try:
        sc.runtime.bus.add_sync(Rec())
        _wait(lambda: len(sc.runtime.scheduler_backend.executors) == 2)
        counts = sorted(sc.textFile(str(text), 4).flatMap(str.split)
                        .map(lambda w: (w, 1)).reduceByKey(add, 4).collect())
        pairs = sc.parallelize([(i * 7919 % 1000, i) for i in range(2000)], 4)
        ordered = pairs.sortByKey(numPartitions=3).collect()
        hosts = {eid: d.address for eid, d in sc.runtime.scheduler_backend.executors.items()}
    finally:
        sc.stop()
    with SparkContext("local[2]", "wc-local") as local:
        expected = sorted(local.textFile(str(text), 4).flatMap(str.split)
                          .map(lambda w: (w, 1)).reduceByKey(add, 4).collect())
        expected_sort = local.parallelize([(i * 7919 % 1000, i) for i in range(2000)], 4) \
            .sortByKey(numPartitions=3).collect()
    assert counts == expected
    assert [k for k, _ in ordered] == [k for k, _ in expected_sort]
    assert len(set(hosts.values())) == 2
    assert sum(remote) > 0, "some shuffle blocks must have been fetched from the other executor"


def test_reducers_read_other_executors_files_on_their_host_from_disk(cluster):
    """spark.shuffle.readHostLocalDisk (on by default): the executors share this host, so
    no shuffle byte goes over RPC, and the answer is the same."""
    read, executors = [], set()

    class Rec:
        def on_event(self, e):
            if isinstance(e, sl.TaskEnd):
                read.append((e.metrics.get("shuffleLocalBytesRead", 0),
                             e.metrics.get("shuffleRemoteBytesRead", 0)))
                executors.add(e.task_info.executor_id)

    sc = _context(cluster, "host-local")
    try:
        sc.runtime.bus.add_sync(Rec())
        _wait(lambda: len(sc.runtime.scheduler_backend.executors) == 2)
        pairs = sc.parallelize(range(8), 8).flatMap(lambda i: [(k, "v" * 50) for k in range(i, 400)])
        got = sorted(pairs.reduceByKey(lambda a, b: a + b, 6).mapValues(len).collect())
    finally:
        sc.stop()
    assert got == [(k, 50 * min(k + 1, 8)) for k in range(400)]
    assert len(executors) == 2
    assert sum(local for local, _ in read) > 0 and sum(remote for _, remote in read) == 0


def test_application_appears_in_master_json_and_executors_register(cluster):
    sc = _context(cluster, "json-app")
    try:
        app_id = sc.applicationId
        assert app_id.startswith("app-") and len(app_id.split("-")[1]) == 14
        j = cluster.wait_for(lambda j: any(a["id"] == app_id for a in j["activeapps"]))
        app = [a for a in j["activeapps"] if a["id"] == app_id][0]
        assert app["name"] == "json-app" and isinstance(app["starttime"], int)
        _wait(lambda: len(sc.runtime.scheduler_backend.executors) == 2)
        assert sc.defaultParallelism == 4
    finally:
        sc.stop()
    j = cluster.wait_for(lambda j: any(a["id"] == app_id for a in j["completedapps"]))
    assert [a["state"] for a in j["completedapps"] if a["id"] == app_id] == ["FINISHED"]


def test_killing_the_driver_ends_the_application_and_its_executors(cluster, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(f"""
        import time
        from ember import SparkContext
        sc = SparkContext("{cluster.url}", "doomed-driver")
        sc.parallelize(range(4), 4).count()
        print("READY", sc.applicationId, flush=True)
        sc.parallelize(range(4), 4).map(lambda x: time.sleep(120)).count()
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            env=_env(), cwd=ROOT)
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("READY"), line
        app_id = line.split()[1]
        executors_before = [p for p in _cluster_children(cluster) if _is_executor(p)]
        assert executors_before
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        cluster.wait_for(lambda j: any(a["id"] == app_id for a in j["completedapps"]), 30)
        _wait(lambda: not any(_is_executor(p) for p in _cluster_children(cluster)), 30)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_worker_killed_mid_job_job_completes_and_worker_goes_dead(tmp_path):
    with LocalCluster(str(tmp_path / "c"), workers=2, cores=2,
                      conf={"spark.worker.timeout": "2"}) as cluster:
        sc = _context(cluster, "survivor")
        try:
            _wait(lambda: len(sc.runtime.scheduler_backend.executors) == 2)
            data = sc.parallelize(range(20000), 8).map(lambda x: (x % 97, x))
            summed = data.reduceByKey(add, 4)
            expected = {k: sum(x for x in range(20000) if x % 97 == k) for k in range(97)}

            def slow(kv):
                time.sleep(0.05)
                return kv
            killer_done = []

            def kill_later():
                time.sleep(1.0)
                cluster.kill_worker(0)
                killer_done.append(True)
            t = threading.Thread(target=kill_later)
            t.start()
            result = dict(summed.map(slow).collect())
            t.join()
            assert killer_done and result == expected
            j = cluster.wait_for(lambda j: j["aliveworkers"] == 1, 30)
            assert j["cores"] == 2
            assert any(w["state"] == "DEAD" for w in j["workers"])
        finally:
            sc.stop()


def test_a_stopped_executor_is_removed_after_the_network_timeout_and_replaced(tmp_path,
                                                                              caplog):
    """Spark's HeartbeatReceiver: an executor process stopped mid-job (SIGSTOP: its
    connection stays open, it answers nothing) held its tasks until it was continued. Now
    the driver removes it once spark.network.timeout passes without a heartbeat, its tasks
    run elsewhere, the master kills it and launches a replacement."""
    with LocalCluster(str(tmp_path / "c"), workers=2, cores=1,
                      conf={"spark.ember.worker.executorTerminateTimeout": "1"}) as cluster:
        sc = _context(cluster, "stopped-executor", spark_network_timeout="3s",
                      spark_network_timeoutInterval="500ms",
                      spark_executor_heartbeatInterval="500ms")
        victim = None
        try:
            backend = sc.runtime.scheduler_backend
            _wait(lambda: len(backend.executors) == 2)
            first = set(backend.executors)

            def slow(x):
                time.sleep(0.05)
                return x
            result = []
            job = threading.Thread(target=lambda: result.append(
                sc.parallelize(range(200), 20).map(slow).sum()))
            with caplog.at_level("WARNING", logger="ember.scheduler.standalone"):
                job.start()
                time.sleep(0.5)
                victim = next(p for p in _cluster_children(cluster) if _is_executor(p))
                victim.send_signal(signal.SIGSTOP)
                job.join(60)
                assert not job.is_alive() and result == [sum(range(200))]
                _wait(lambda: len(backend.executors) == 2 and set(backend.executors) != first,
                      timeout=30)
            assert any("with no recent heartbeats" in r.getMessage()
                       and "exceeds timeout 3000 ms" in r.getMessage()
                       for r in caplog.records)
            # the master killed it (SIGKILL after the worker's 1 s grace: it cannot run its
            # SIGTERM handler while stopped)
            _wait(lambda: not victim.is_running() or victim.status() == psutil.STATUS_ZOMBIE,
                  timeout=30)
            assert sc.parallelize(range(10), 4).sum() == 45
        finally:
            if victim is not None and victim.is_running():
                victim.send_signal(signal.SIGCONT)
            sc.stop()


def test_a_master_stopped_longer_than_the_worker_timeout_removes_no_worker(tmp_path):
    """Continued after 6 s stopped (spark.worker.timeout 2 s), the master checked for dead
    workers before reading the heartbeats waiting in its sockets and removed both, and the
    application's executors with them. Now the late check removes nobody."""
    with LocalCluster(str(tmp_path / "c"), workers=2, cores=1,
                      conf={"spark.worker.timeout": "2"}) as cluster:
        sc = _context(cluster, "stopped-master")
        try:
            backend = sc.runtime.scheduler_backend
            _wait(lambda: len(backend.executors) == 2)
            executors = set(backend.executors)
            cluster.master.send_signal(signal.SIGSTOP)
            try:
                time.sleep(6)
            finally:
                cluster.master.send_signal(signal.SIGCONT)
            time.sleep(3)               # a check on time after the late one
            assert set(backend.executors) == executors
            assert cluster.json()["aliveworkers"] == 2
            assert "this master was stopped or starved" in cluster.log("master.log")
            assert sc.parallelize(range(10), 4).sum() == 45
        finally:
            sc.stop()


def test_auth_refuses_peers_without_the_secret(tmp_path):
    secret = "s3cr3t-for-tests-long-enough-to-be-accepted"
    conf = {"spark.authenticate": "true", "spark.authenticate.secret": secret}
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=1, conf=conf) as cluster:
        # a driver without the secret is refused
        with pytest.raises(Exception):
            c = SparkConf().setMaster(cluster.url).setAppName("no-secret") \
                .set("spark.rpc.askTimeout", "3s")
            sc = SparkContext(conf=c)
            sc.stop()
        # a worker without the secret is refused and gives up
        rogue = subprocess.run(
            [sys.executable, "-m", "ember.cli", "worker", "--host", "127.0.0.1",
             "--webui-port", "0", "-c", "1", "-m", "512m", "-d", str(tmp_path / "rogue"),
             "--conf", "spark.worker.initialRegistrationRetries=1",
             "--conf", "spark.worker.maxRegistrationRetries=1",
             "--conf", "spark.ember.worker.registrationIntervalScale=0.05", cluster.url],
            env=_env(), capture_output=True, timeout=60)
        assert rogue.returncode == 1
        assert cluster.json()["aliveworkers"] == 1
        # raw garbage and a pickled payload are dropped without being decoded
        for payload in (b"\x00\x00\x00\x10garbage-garbage!",
                        pickle.dumps(("RegisterWorker", os.system))):
            with socket.create_connection(("127.0.0.1", cluster.master_port), timeout=5) as s:
                s.sendall(payload)
                s.settimeout(5)
                try:
                    while s.recv(4096):
                        pass
                except (ConnectionResetError, socket.timeout):
                    pass
        # the master keeps serving authenticated peers
        sc = _context(cluster, "with-secret", spark_authenticate="true",
                      spark_authenticate_secret=secret)
        try:
            assert sc.parallelize(range(10), 2).sum() == 45
        finally:
            sc.stop()
        assert cluster.json()["aliveworkers"] == 1


def _cluster_children(cluster: LocalCluster) -> list[psutil.Process]:
    return [p for p in cluster.all_processes() if p.pid not in
            {q.pid for q in [cluster.master, *cluster.workers] if q is not None}]


def _is_executor(p: psutil.Process) -> bool:
    try:
        return "ember.executor.backend" in " ".join(p.cmdline())
    except psutil.NoSuchProcess:
        return False


def test_submit_client_mode_ships_py_files_and_files(cluster, tmp_path):
    (tmp_path / "helpermod.py").write_text("def triple(x):\n    return 3 * x\n")
    with zipfile.ZipFile(tmp_path / "ziplib.zip", "w") as z:
        z.writestr("ziplib.py", "def double(x):\n    return 2 * x\n")
    (tmp_path / "data.txt").write_text("41\n")
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent("""
        import sys
        from ember import SparkContext, SparkFiles
        from ziplib import double       # the stage pickles it by reference: the executors
        sc = SparkContext.getOrCreate()  # fetch the zip before they load the stage
        print("DIRECT", sc.parallelize(range(3), 3).map(double).collect())

        def work(x):
            import helpermod
            with open(SparkFiles.get("data.txt")) as f:
                return helpermod.triple(x) + int(f.read())
        print("RESULT", sorted(sc.parallelize(range(4), 4).map(work).collect()), sys.argv[1:])
        print("APP", sc.appName, sc.getConf().get("spark.executor.memory"))
        sc.stop()
    """))
    out = subprocess.run(
        [sys.executable, "-m", "ember.cli", "submit", "--master", cluster.url,
         "--name", "submitted", "--executor-memory", "512m",
         "--py-files", f"{tmp_path / 'helpermod.py'},{tmp_path / 'ziplib.zip'}",
         "--files", str(tmp_path / "data.txt"),
         str(app), "x", "y"],
        env=_env(), capture_output=True, timeout=120, cwd=str(tmp_path / ".."))
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    lines = out.stdout.decode().splitlines()
    assert "RESULT [41, 44, 47, 50] ['x', 'y']" in lines
    assert "DIRECT [0, 2, 4]" in lines
    assert "APP submitted 512m" in lines


def test_daemon_cli_rejects_bad_input_with_one_line(tmp_path):
    cases = [["worker", "-m", "12x", "spark://127.0.0.1:7077"],
             ["worker", "-c", "0", "spark://127.0.0.1:7077"],
             ["worker", "-c", "1", "http://nowhere:7077"],
             ["master", "--port", "notaport"]]
    for args in cases:
        out = subprocess.run([sys.executable, "-m", "ember.cli", *args], env=_env(),
                             capture_output=True, timeout=60)
        err = out.stderr.decode().strip().splitlines()
        assert out.returncode == 1, (args, out.stderr)
        assert len(err) == 1 and err[0].startswith("Error:"), (args, err)
        assert "Traceback" not in out.stderr.decode()


def test_an_idle_executor_task_process_death_drops_its_cached_blocks(cluster):
    """A task process on an executor dies with no task running: its executor tells the
    driver (TaskProcessLost), which stops listing the partitions it cached in memory there,
    and only those; the next action caches them again."""
    sc = _context(cluster, "task-process-lost")
    try:
        _wait(lambda: len(sc.runtime.scheduler_backend.executors) == 2)
        rdd = sc.parallelize(range(8), 8).cache()
        assert rdd.sum() == 28

        def held() -> set[tuple[str, str, int]]:
            return {(name, b.executor_id, b.slot) for name, bs in
                    sc.runtime.block_manager_master.rdd_blocks(rdd.id()).items() for b in bs}
        before = held()
        assert {name for name, _, _ in before} == {f"rdd_{rdd.id()}_{i}" for i in range(8)}
        psutil.Process(rdd.mapPartitions(lambda it: [os.getpid()]).first()).kill()
        after = _wait(lambda: (lambda now: now if now < before else None)(held()), timeout=10)
        dead = {(ex, slot) for _, ex, slot in before - after}
        assert len(dead) == 1           # one process's blocks, all of them
        assert not {b for b in after if b[1:] in dead}
        assert rdd.sum() == 28
        assert {name for name, _, _ in held()} == {name for name, _, _ in before}
    finally:
        sc.stop()


def test_unpersist_and_broadcast_updates_reach_executors(cluster):
    sc = _context(cluster, "unpersist")
    try:
        _wait(lambda: len(sc.runtime.scheduler_backend.executors) == 2)
        rdd = sc.parallelize(range(100), 4).map(lambda x: x + 1).cache()
        assert rdd.sum() == 5050
        assert sc.runtime.block_manager_master.rdd_blocks(rdd.id())
        rdd.unpersist()
        assert not sc.runtime.block_manager_master.rdd_blocks(rdd.id())
        assert rdd.sum() == 5050          # recomputed from lineage
        b = sc.broadcast([1, 2, 3])
        assert sc.parallelize(range(4), 4).map(lambda x: sum(b.value)).collect() == [6] * 4
        b.unpersist()
        assert sc.parallelize(range(4), 4).map(lambda x: len(b.value)).collect() == [3] * 4
    finally:
        sc.stop()
