"""Cluster deploy mode over real processes: submit, REST and RPC gateways, supervise, kill,
worker loss, logs, authentication and bad input (issue 4's "must show" list)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import psutil
import pytest

from tests.cluster import LocalCluster, _env

pytestmark = pytest.mark.timeout(240)
FINAL = {"FINISHED", "FAILED", "ERROR", "KILLED"}


def ember(*args: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=_env(env))


def submit(cluster: LocalCluster, *args: str, master: str | None = None,
           **kw) -> subprocess.CompletedProcess:
    return ember("submit", "--master", master or cluster.url, "--deploy-mode", "cluster",
                 *args, **kw)


def write_app(directory, name: str, body: str) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(body))
    return path


def driver(cluster: LocalCluster, driver_id: str) -> dict | None:
    j = cluster.json()
    for d in j["activedrivers"] + j["completeddrivers"]:
        if d["id"] == driver_id:
            return d
    return None


def wait_driver(cluster: LocalCluster, driver_id: str, states=FINAL, timeout=60.0) -> dict:
    j = cluster.wait_for(lambda j: any(d["id"] == driver_id and d["state"] in states
                                       for d in j["activedrivers"] + j["completeddrivers"]),
                         timeout)
    return next(d for d in j["activedrivers"] + j["completeddrivers"] if d["id"] == driver_id)


def driver_processes(driver_id: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        try:
            cmd = p.info["cmdline"] or []
            if "ember.deploy.driver_wrapper" in cmd and (p.info["cwd"] or "").endswith(driver_id):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def rest(cluster: LocalCluster, method: str, path: str, body: bytes | None = None,
         headers: dict | None = None, port: int | None = None) -> tuple[int, dict]:
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(f"http://127.0.0.1:{port or cluster.rest_port}{path}",
                                 data=body, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_python_app_from_a_private_dir_runs_on_a_worker_after_submit_has_exited(
        cluster, tmp_path):
    private = tmp_path / "private"
    app = write_app(private, "slow_count.py", """
        import sys, time
        from operator import add
        from ember import SparkContext
        time.sleep(2.5)
        sc = SparkContext(appName="slow-count")
        n = sc.parallelize(range(1000), 4).map(lambda x: (x % 3, 1)).reduceByKey(add)
        print("COUNTS", sorted(n.collect()), sys.argv[1:])
        sc.stop()
    """)
    r = submit(cluster, app, "a1", "a2")
    assert r.returncode == 0, r.stderr
    driver_id = r.stdout.split()[0]
    assert driver_id.startswith("driver-")
    # submit has exited while the driver still runs (waitAppCompletion=false)
    assert driver(cluster, driver_id)["state"] == "RUNNING"
    shutil.rmtree(private)          # the workers never needed the submitter's directory
    d = wait_driver(cluster, driver_id)
    assert d["state"] == "FINISHED", ember("logs", driver_id, "--master", cluster.url,
                                           "--stderr").stdout
    out = ember("logs", driver_id, "--master", cluster.url)
    assert "COUNTS [(0, 334), (1, 333), (2, 333)] ['a1', 'a2']" in out.stdout
    st = ember("submit", "--master", cluster.url, "--status", driver_id)
    assert st.returncode == 0 and f"State of {driver_id} is FINISHED" in st.stdout
    # its application registered like any other
    assert any(a["name"] == "slow-count" for a in cluster.json()["completedapps"])


def test_follow_streams_output_and_exits_with_the_drivers_code(cluster, tmp_path):
    app = write_app(tmp_path, "noisy.py", """
        import sys
        print("line one", flush=True)
        print("line two")
        sys.exit(3)
    """)
    r = submit(cluster, "--follow", app)
    assert r.returncode == 3, r.stderr
    driver_id, rest_out = r.stdout.split("\n", 1)
    assert rest_out == "line one\nline two\n"
    assert wait_driver(cluster, driver_id)["state"] == "FAILED"
    st = ember("submit", "--master", cluster.url, "--status", driver_id)
    assert "Exit code: 3" in st.stdout


def test_uncaught_exception_reaches_status(cluster, tmp_path):
    app = write_app(tmp_path, "boom.py", """
        def explode():
            raise ValueError("bad input 42")
        explode()
    """)
    r = submit(cluster, app)
    driver_id = r.stdout.split()[0]
    wait_driver(cluster, driver_id)
    st = ember("submit", "--master", cluster.url, "--status", driver_id)
    assert "ValueError: bad input 42" in st.stdout
    assert "explode" in st.stdout      # the traceback, user frames


def test_module_in_a_directory_with_class_and_py_files(cluster, tmp_path):
    pkg = tmp_path / "proj"
    write_app(pkg / "mypkg", "__init__.py", "")
    write_app(pkg / "mypkg", "job.py", """
        import sys
        import helper
        def main():
            print("JOB", helper.VALUE, sys.argv[1:])
    """)
    helper = write_app(tmp_path / "libs", "helper.py", "VALUE = 'from-py-files'\n")
    r = submit(cluster, "--follow", "--py-files", helper, "--class", "mypkg.job", str(pkg),
               "x")
    assert r.returncode == 0, r.stderr
    assert "JOB from-py-files ['x']" in r.stdout


def test_archives_are_unpacked_for_the_driver_and_the_executors(cluster, tmp_path):
    """--archives, uploaded by the submitter, then unpacked for the driver (on a worker)
    and each executor under their name or #alias (SparkContext.addArchive)."""
    import tarfile
    import zipfile
    (tmp_path / "v.txt").write_text("7")
    with zipfile.ZipFile(tmp_path / "data.zip", "w") as z:
        z.write(tmp_path / "v.txt", "v.txt")
    with tarfile.open(tmp_path / "env.tar.gz", "w:gz") as t:
        t.add(tmp_path / "v.txt", "bin/v.txt")
    app = write_app(tmp_path, "arch_app.py", """
        import os
        from ember import SparkContext, SparkFiles
        sc = SparkContext.getOrCreate()

        def read(_):
            with open(os.path.join(SparkFiles.get("data.zip"), "v.txt")) as a, \\
                    open(os.path.join(SparkFiles.get("environment"), "bin", "v.txt")) as b:
                return int(a.read()) * 10 + int(b.read())
        print("ARCHIVES", sc.parallelize(range(2), 2).map(read).collect(),
              [a.rsplit("/", 1)[-1] for a in sc.listArchives])
        sc.stop()
    """)
    r = submit(cluster, "--follow", "--archives",
               f"{tmp_path / 'data.zip'},{tmp_path / 'env.tar.gz'}#environment", app)
    assert r.returncode == 0, ember("logs", r.stdout.split()[0], "--master", cluster.url,
                                    "--stderr").stdout
    assert "ARCHIVES [77, 77] ['data.zip', 'env.tar.gz#environment']" in r.stdout


def test_rest_create_status_kill_with_curl_style_json(cluster, tmp_path):
    app = write_app(tmp_path, "sleeper.py", """
        import sys, time
        print("REST APP", sys.argv[1:], flush=True)
        time.sleep(60)
    """)
    # Spark's documented request shape: SparkSubmit as main class, the .py file in appArgs
    body = {"action": "CreateSubmissionRequest", "appArgs": [app, "10"], "appResource": "",
            "clientSparkVersion": "4.1.1", "environmentVariables": {},
            "mainClass": "org.apache.spark.deploy.SparkSubmit",
            "sparkProperties": {"spark.app.name": "rest-app", "spark.driver.cores": "1",
                                "spark.driver.memory": "512m", "spark.master": cluster.rest_url,
                                "spark.jars": "", "spark.bogus": "1"},
            "extraField": 1}
    code, resp = rest(cluster, "POST", "/v1/submissions/create", json.dumps(body).encode(),
                      {"Content-Type": "application/json"})
    assert code == 200 and resp["success"] is True, resp
    assert resp["action"] == "CreateSubmissionResponse" and resp["unknownFields"] == ["extraField"]
    driver_id = resp["submissionId"]
    wait_driver(cluster, driver_id, {"RUNNING"})
    deadline = time.time() + 30
    while "REST APP" not in ember("logs", driver_id, "--master", cluster.url).stdout:
        assert time.time() < deadline
        time.sleep(0.2)
    code, st = rest(cluster, "GET", f"/v1/submissions/status/{driver_id}")
    assert code == 200 and st["driverState"] == "RUNNING" and st["workerId"].startswith("worker-")
    cores_before = cluster.json()["coresused"]
    code, k = rest(cluster, "POST", f"/v1/submissions/kill/{driver_id}")
    assert code == 200 and k["success"] is True
    assert wait_driver(cluster, driver_id)["state"] == "KILLED"
    cluster.wait_for(lambda j: j["coresused"] == cores_before - 1)
    assert not driver_processes(driver_id)


def test_submit_over_rest_and_fallback_to_rpc(cluster, tmp_path):
    app = write_app(tmp_path, "hello.py", "print('hello over', __name__)\n")
    via_rest = submit(cluster, "--follow", "--conf", "spark.master.rest.enabled=true", app,
                      master=cluster.rest_url)
    assert via_rest.returncode == 0, via_rest.stderr
    assert "hello over __main__" in via_rest.stdout
    assert "Falling back" not in via_rest.stderr
    # REST enabled on the client, but the URL is the RPC port: no REST server there
    fallback = submit(cluster, "--follow", "--conf", "spark.master.rest.enabled=true", app)
    assert fallback.returncode == 0, fallback.stderr
    assert "was not a REST server. Falling back to legacy submission gateway" in fallback.stderr
    assert "hello over __main__" in fallback.stdout


def test_kill_and_unknown_status_over_rpc(cluster, tmp_path):
    app = write_app(tmp_path, "forever.py", "import time\ntime.sleep(120)\n")
    cores_before = cluster.json()["coresused"]
    driver_id = submit(cluster, app).stdout.split()[0]
    wait_driver(cluster, driver_id, {"RUNNING"})
    cluster.wait_for(lambda j: j["coresused"] >= cores_before + 1)
    k = ember("submit", "--master", cluster.url, "--kill", driver_id)
    assert k.returncode == 0 and f"{driver_id} is killed successfully." in k.stdout
    assert wait_driver(cluster, driver_id)["state"] == "KILLED"
    cluster.wait_for(lambda j: j["coresused"] == cores_before)
    st = ember("submit", "--master", cluster.url, "--status", "driver-19990101000000-9999")
    assert st.returncode == 255
    assert "Cluster master did not recognize driver-19990101000000-9999" in st.stderr


def test_supervised_driver_restarts_after_kill_9_and_gives_up_after_the_limit(
        cluster, tmp_path):
    app = write_app(tmp_path, "long.py", "import time\nprint('up', flush=True)\n"
                                         "time.sleep(120)\n")
    driver_id = submit(cluster, "--supervise", app).stdout.split()[0]
    deadline = time.time() + 30
    while not driver_processes(driver_id):
        assert time.time() < deadline
        time.sleep(0.1)
    (first,) = driver_processes(driver_id)
    first.kill()
    deadline = time.time() + 30
    while not [p for p in driver_processes(driver_id) if p.pid != first.pid]:
        assert time.time() < deadline
        time.sleep(0.1)
    assert driver(cluster, driver_id)["state"] == "RUNNING"
    assert ember("submit", "--master", cluster.url, "--kill", driver_id).returncode == 0
    assert wait_driver(cluster, driver_id)["state"] == "KILLED"

    failing = write_app(tmp_path, "fails.py", "import sys\nsys.exit(7)\n")
    r = submit(cluster, "--supervise", "--conf", "spark.driver.supervise.maxRetries=2",
               failing)
    driver_id = r.stdout.split()[0]
    assert wait_driver(cluster, driver_id, timeout=60)["state"] == "FAILED"
    st = ember("submit", "--master", cluster.url, "--status", driver_id)
    assert "spark.driver.supervise.maxRetries=2" in st.stdout
    assert "Exit code: 7" in st.stdout


def test_worker_loss_relaunches_a_supervised_driver_and_errors_an_unsupervised_one(tmp_path):
    # each driver also keeps room for one executor (1 core, 1g) of its application on the
    # master: the surviving worker must hold both drivers and both reservations
    with LocalCluster(str(tmp_path / "c"), workers=2, cores=4, memory="4g",
                      conf={"spark.worker.timeout": "3"}) as c:
        app = write_app(tmp_path, "long.py", "import time\nprint('up', flush=True)\n"
                                             "time.sleep(120)\n")
        sup = submit(c, "--supervise", "--driver-memory", "512m", app).stdout.split()[0]
        first = wait_driver(c, sup, {"RUNNING"})
        plain = submit(c, "--driver-memory", "512m", app).stdout.split()[0]
        wait_driver(c, plain, {"RUNNING"})
        deadline = time.time() + 30
        while not (driver_processes(sup) and driver_processes(plain)):
            assert time.time() < deadline
            time.sleep(0.1)
        old = driver_processes(sup)[0]
        lost = first["worker"]
        index = next(i for i in range(2) if old in c.worker_tree(i))
        c.kill_worker(index)
        relaunched = c.wait_for(lambda j: any(
            d["id"] == sup and d["state"] == "RUNNING" and d["worker"] != lost
            for d in j["activedrivers"]), 30)
        assert relaunched
        psutil.wait_procs([old], timeout=10)
        assert not old.is_running()                      # fate sharing with its worker
        st = ember("submit", "--master", c.url, "--status", sup)
        assert f"State of {sup} is RUNNING" in st.stdout
        plain_state = driver(c, plain)["state"]
        if driver_processes(plain):                      # it ran on the surviving worker
            assert plain_state == "RUNNING"
        else:
            assert plain_state == "ERROR"
        deadline = time.time() + 20
        while len(driver_processes(sup)) != 1:
            assert time.time() < deadline
            time.sleep(0.1)
        (live,) = driver_processes(sup)
        assert live.pid != old.pid


def test_rest_requires_a_valid_bearer_token_when_authentication_is_on(tmp_path):
    from ember.web.jws import sign_hs256
    secret = "a-test-secret-that-is-long-enough-for-hs256"
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=1,
                      conf={"spark.authenticate": "true",
                            "spark.authenticate.secret": secret}) as c:
        body = json.dumps({"action": "CreateSubmissionRequest", "appArgs": [],
                           "appResource": "", "clientSparkVersion": "4.1.1",
                           "environmentVariables": {}, "mainClass": "json",
                           "sparkProperties": {"spark.master": c.rest_url,
                                               "spark.app.name": "authed"}}).encode()
        wrong = sign_hs256({"sub": "x", "exp": time.time() + 60}, b"another-secret")
        for headers, text in (({}, "Authorization header is missing."),
                              ({"Authorization": "Basic abc"}, "Malformed Authorization header."),
                              ({"Authorization": "Bearer not.a.jwt"}, "JWT Validate Fail"),
                              ({"Authorization": f"Bearer {wrong}"}, "JWT Validate Fail")):
            req = urllib.request.Request(f"http://127.0.0.1:{c.rest_port}/v1/submissions/create",
                                         data=body, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  **headers})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(req, timeout=10)
            assert refused.value.code == 403
            assert refused.value.read().decode() == text, headers
        assert c.json()["activedrivers"] == [] and c.json()["completeddrivers"] == []
        good = sign_hs256({"sub": "ember-test", "exp": time.time() + 60}, secret.encode())
        code, resp = rest(c, "POST", "/v1/submissions/create", body,
                          {"Authorization": f"Bearer {good}"})
        assert code == 200 and resp["success"] is True


def test_bad_input_changes_nothing_and_the_master_keeps_serving(cluster, tmp_path):
    before = cluster.json()
    n_drivers = len(before["activedrivers"]) + len(before["completeddrivers"])
    for body in (b"{not json", b'{"action":"CreateSubmissionRequest","appArgs":"x"}',
                 b'{"action":"NoSuchAction"}',
                 json.dumps({"action": "CreateSubmissionRequest", "clientSparkVersion": "4",
                             "sparkProperties": {}, "mainClass": "m"}).encode()):
        code, resp = rest(cluster, "POST", "/v1/submissions/create", body)
        assert code in (400, 500) and resp["action"] == "ErrorResponse", resp
    code, resp = rest(cluster, "GET", "/v2/submissions/status/x")
    assert code == 468 and resp["highestProtocolVersion"] == "v1"
    code, resp = rest(cluster, "GET", "/v1/submissions/status/driver-nope")
    assert code == 200 and resp["success"] is False
    big = tmp_path / "big.py"
    big.write_bytes(b"#" * 2048)
    after = cluster.json()
    assert len(after["activedrivers"]) + len(after["completeddrivers"]) == n_drivers
    assert after["status"] == "ALIVE"
    r = ember("logs", "driver-nope", "--master", cluster.url)
    assert r.returncode == 1 and "driver-nope" in r.stderr


def test_oversized_upload_is_refused(tmp_path):
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=1,
                      conf={"spark.ember.submit.maxUploadSize": "1k"}) as c:
        app = tmp_path / "big.py"
        app.write_text("x = 1\n" * 1000)
        r = submit(c, str(app))
        assert r.returncode == 1
        assert "more than the 1024 bytes allowed" in r.stderr
        j = c.json()
        assert j["activedrivers"] == [] and j["completeddrivers"] == []


def test_status_and_kill_print_spark_submits_block_over_rest_and_rpc(cluster, tmp_path):
    """What tools that parse spark-submit read (Airflow's `"driverState" : "X",`), whichever
    gateway answers: the REST URL, the RPC URL with the REST port configured (REST first),
    and the RPC URL alone (no REST server on 6066 here: RPC fallback)."""
    app = write_app(tmp_path, "forever.py", "import time\ntime.sleep(120)\n")
    driver_id = submit(cluster, app).stdout.split()[0]
    running = wait_driver(cluster, driver_id, {"RUNNING"})
    rest_port = f"spark.master.rest.port={cluster.rest_port}"
    for args in (["--master", cluster.rest_url], ["--master", cluster.url, "--conf", rest_port],
                 ["--master", cluster.url]):
        st = ember("submit", *args, "--status", driver_id)
        assert st.returncode == 0, st.stderr
        block = st.stdout.split("\n}\n", 1)[0] + "\n}"
        assert block.startswith("Server responded with SubmissionStatusResponse:\n{\n")
        body = json.loads(block.split("\n", 1)[1])
        assert body == {"action": "SubmissionStatusResponse", "driverState": "RUNNING",
                        "serverSparkVersion": "4.1.1", "submissionId": driver_id,
                        "success": True, "workerHostPort": body["workerHostPort"],
                        "workerId": running["worker"]}
        assert '  "driverState" : "RUNNING",\n' in st.stdout      # Jackson's layout
        assert f"State of {driver_id} is RUNNING" in st.stdout
        assert f"Driver running on {body['workerHostPort']} ({running['worker']})" in st.stdout

    k = ember("submit", "--master", cluster.rest_url, "--kill", driver_id)
    assert k.returncode == 0
    assert k.stdout.startswith("Server responded with KillSubmissionResponse:\n{\n")
    assert '  "success" : true\n' in k.stdout
    assert f"{driver_id} is killed successfully." in k.stdout
    assert wait_driver(cluster, driver_id)["state"] == "KILLED"
    st = ember("submit", "--master", cluster.url, "--status", driver_id)
    assert '  "driverState" : "KILLED",\n' in st.stdout
    assert f"State of {driver_id} is KILLED" in st.stdout
    assert "Driver running on" not in st.stdout                    # it has left its worker
    # a kill the master refuses: Spark logs the message at ERROR and exits 0
    for master in (cluster.url, cluster.rest_url):
        again = ember("submit", "--master", master, "--kill", driver_id)
        assert again.returncode == 0
        assert '  "success" : false\n' in again.stdout
        assert (f"ERROR SparkSubmit: Driver {driver_id} has already finished or does not exist"
                in again.stderr)


def test_spark3_submit_is_ember_submit():
    import tomllib
    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "pyproject.toml"),
              "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts["spark3-submit"] == "ember.cli:submit_main"
    assert "spark-submit" not in scripts              # PySpark's name stays PySpark's
    r = subprocess.run([sys.executable, "-c", "import sys; from ember.cli import submit_main; "
                        "sys.argv = ['spark3-submit', '--version']; sys.exit(submit_main())"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert r.returncode == 0 and "version" in r.stdout
    r = subprocess.run([sys.executable, "-c", "import sys; from ember.cli import submit_main; "
                        "sys.argv = ['spark3-submit', '--master', 'local', '--kill', 'x']; "
                        "sys.exit(submit_main())"], capture_output=True, text=True, env=_env(),
                       timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("Error: ")


def test_rest_first_urls_and_a_master_named_twice():
    from ember.deploy.app_client import parse_master_urls
    from ember.deploy.client import rest_first_urls
    from ember.rpc import RpcAddress
    assert rest_first_urls("spark://h:7077", {}) == [("spark://h:6066", False),
                                                     ("spark://h:7077", True)]
    assert rest_first_urls("spark://a:7077,b:7077", {"spark.master.rest.port": "6100"}) == [
        ("spark://a:6100,b:6100", False), ("spark://a:7077,b:7077", True)]
    assert rest_first_urls("spark://h:6066", {}) == [("spark://h:6066", True)]
    assert rest_first_urls("spark://h:7077", {"spark.master.rest.port": "x"}) == [
        ("spark://h:7077", True)]
    assert parse_master_urls("spark://h:7077,h:7077,g:7077") == [RpcAddress("h", 7077),
                                                                 RpcAddress("g", 7077)]
