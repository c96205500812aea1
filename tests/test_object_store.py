"""Paths through fsspec against a real S3-compatible server (moto's server mode on a free
loopback port, started once per session) and a local HTTP server: reads, splits, the output
commit protocol, checkpoints, added files, event logs and the history server, submitted apps
- on local[2] and on a 2-worker cluster whose executors get the endpoint and keys from the
application's conf only."""
from __future__ import annotations

import functools
import gzip
import http.server
import io
import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import urllib.request
import uuid
import zipfile

import pytest

from ember import SparkConf
from ember.errors import FileAlreadyExistsException, InvalidInputException
from tests.cluster import _env

pytestmark = pytest.mark.timeout(300)

SECRET = "s3cr3t-Value-7f3a"     # moto accepts any key pair; this one must never leak


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server on 127.0.0.1 (port 0: the kernel picks a free one)."""
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def s3_keys(s3_endpoint):
    """Spark's S3A keys for the server: what users put in --conf or spark-defaults.conf."""
    return {"spark.hadoop.fs.s3a.endpoint": s3_endpoint,
            "spark.hadoop.fs.s3a.access.key": "AKIDTEST",
            "spark.hadoop.fs.s3a.secret.key": SECRET,
            "spark.hadoop.fs.s3a.path.style.access": "true"}


@pytest.fixture
def bucket(s3_endpoint):
    """A fresh bucket per test and a boto3 client to look at it."""
    import boto3
    client = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id="AKIDTEST",
                          aws_secret_access_key=SECRET, region_name="us-east-1")
    name = "ember-" + uuid.uuid4().hex[:12]
    client.create_bucket(Bucket=name)
    return name, client


def keys_of(client, name: str, prefix: str = "") -> list[str]:
    resp = client.list_objects_v2(Bucket=name, Prefix=prefix)
    return sorted(o["Key"] for o in resp.get("Contents", []))


@pytest.fixture
def s3_sc(fresh_sc, s3_keys):
    conf = SparkConf().set("spark.ui.enabled", "false")
    for k, v in s3_keys.items():
        conf.set(k, v)
    return fresh_sc("local[2]", "s3-tests", conf)


def _text(n_lines: int, seed: int) -> bytes:
    rnd = random.Random(seed)
    lines = []
    for i in range(n_lines):
        lines.append(("" if rnd.random() < 0.05 else f"line {i} " + "x" * rnd.randint(0, 300)))
    lines[n_lines // 3] = "long " * 60000       # longer than a split and the read-ahead
    return ("\n".join(lines[: n_lines // 2]) + "\r\n" + "\n".join(lines[n_lines // 2:]) +
            "\n").encode()


# --- local[2] --------------------------------------------------------------------------------
def test_reads_a_directory_of_gzipped_and_plain_text_like_local_disk(s3_sc, bucket, tmp_path):
    name, client = bucket
    plain, other = _text(4000, 1), _text(50, 2)
    files = {"logs/a.txt": plain, "logs/b.txt.gz": gzip.compress(other),
             "logs/_SUCCESS": b"", "logs/.hidden": b"nope\n", "logs/sub/c.txt": b"deep\n"}
    for key, body in files.items():
        client.put_object(Bucket=name, Key=key, Body=body)
        local = tmp_path / key
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(body)
    remote = s3_sc.textFile(f"s3a://{name}/logs", 7)
    local = s3_sc.textFile(str(tmp_path / "logs"), 7)
    assert remote.getNumPartitions() == local.getNumPartitions() > 2   # byte-range splits
    assert remote.glom().collect() == local.glom().collect()           # same lines per split
    assert remote.count() == plain.count(b"\n") + other.count(b"\n")
    # globs, comma lists and s3:// work as textFile does on local paths
    assert s3_sc.textFile(f"s3://{name}/logs/*.gz,s3a://{name}/logs/sub").collect() == \
        other.decode().splitlines() + ["deep"]
    with pytest.raises(InvalidInputException, match=f"Input path does not exist: s3a://{name}/no"):
        s3_sc.textFile(f"s3a://{name}/nope").count()
    with pytest.raises(InvalidInputException, match="matches 0 files"):
        s3_sc.textFile(f"s3a://{name}/logs/*.csv").count()
    pairs = s3_sc.wholeTextFiles(f"s3a://{name}/logs/sub").collect()
    assert pairs == [(f"s3a://{name}/logs/sub/c.txt", "deep\n")]
    client.put_object(Bucket=name, Key="logs/sub/late.txt", Body=b"late\n")  # listed afresh
    assert s3_sc.textFile(f"s3a://{name}/logs/sub").collect() == ["deep", "late"]


def test_save_as_text_file_commits_and_reads_back(s3_sc, bucket):
    name, client = bucket
    rdd = s3_sc.parallelize(range(100), 4)
    rdd.saveAsTextFile(f"s3a://{name}/out")
    assert keys_of(client, name, "out/") == ["out/_SUCCESS"] + [f"out/part-0000{i}"
                                                                  for i in range(4)]
    assert sorted(s3_sc.textFile(f"s3a://{name}/out").map(int).collect()) == list(range(100))
    rdd.saveAsTextFile(f"s3a://{name}/gz", "org.apache.hadoop.io.compress.GzipCodec")
    assert "gz/part-00003.gz" in keys_of(client, name, "gz/")
    assert sorted(s3_sc.textFile(f"s3a://{name}/gz").map(int).collect()) == list(range(100))
    with pytest.raises(FileAlreadyExistsException,
                       match=f"Output directory s3a://{name}/out already exists"):
        rdd.saveAsTextFile(f"s3a://{name}/out")
    rdd.saveAsPickleFile(f"s3a://{name}/pickled", 7)
    assert sorted(s3_sc.pickleFile(f"s3a://{name}/pickled").collect()) == list(range(100))
    pairs = [(i, "x" * (i % 9)) for i in range(20000)]
    s3_sc.parallelize(pairs, 2).saveAsSequenceFile(f"s3a://{name}/seq")
    assert sorted(s3_sc.sequenceFile(f"s3a://{name}/seq", minSplits=5).collect()) == pairs


def test_failed_attempts_leave_no_part_file_and_a_failed_job_no_success(fresh_sc, s3_keys,
                                                                        bucket):
    name, client = bucket
    conf = SparkConf().set("spark.ui.enabled", "false")
    for k, v in s3_keys.items():
        conf.set(k, v)
    sc = fresh_sc("local[2,3]", "retries", conf)     # 3 attempts per task

    def flaky(ctx_iter):
        from ember import TaskContext
        ctx = TaskContext.get()
        for x in ctx_iter:
            if ctx.attemptNumber() == 0 and ctx.partitionId() == 1 and x == 60:
                raise RuntimeError("first attempt dies half way")
            yield x
    sc.parallelize(range(100), 3).mapPartitions(flaky).saveAsTextFile(f"s3a://{name}/out")
    assert keys_of(client, name, "out/") == ["out/_SUCCESS", "out/part-00000",
                                            "out/part-00001", "out/part-00002"]
    assert sorted(sc.textFile(f"s3a://{name}/out").map(int).collect()) == list(range(100))

    def always_fails(it):
        raise RuntimeError("never works")
    with pytest.raises(Exception, match="never works"):
        sc.parallelize(range(10), 2).mapPartitions(always_fails).saveAsTextFile(
            f"s3a://{name}/bad")
    assert not [k for k in keys_of(client, name, "bad/") if "part-" in k or "_SUCCESS" in k]


def test_binary_inputs_checkpoints_and_added_files_on_s3(s3_sc, bucket):
    name, client = bucket
    client.put_object(Bucket=name, Key="bin/r.dat", Body=bytes(range(40)))
    assert s3_sc.binaryFiles(f"s3a://{name}/bin").collect() == [(f"s3a://{name}/bin/r.dat",
                                                                 bytes(range(40)))]
    assert s3_sc.binaryRecords(f"s3a://{name}/bin", 10).collect() == [
        bytes(range(i, i + 10)) for i in range(0, 40, 10)]
    s3_sc.setCheckpointDir(f"s3a://{name}/ck")
    rdd = s3_sc.parallelize(range(20), 2).map(lambda x: x * 3)
    rdd.checkpoint()
    assert rdd.count() == 20
    assert rdd.isCheckpointed() and rdd.getCheckpointFile().startswith(f"s3a://{name}/ck/")
    assert any(k.endswith("part-00001") for k in keys_of(client, name, "ck/"))
    assert rdd.sum() == 3 * sum(range(20))
    client.put_object(Bucket=name, Key="deps/helper_mod_s3.py",
                      Body=b"def f(x):\n    return x + 1\n")
    client.put_object(Bucket=name, Key="deps/data.txt", Body=b"hello from s3")
    s3_sc.addPyFile(f"s3a://{name}/deps/helper_mod_s3.py")
    s3_sc.addFile(f"s3a://{name}/deps/data.txt")

    def use(x):
        import helper_mod_s3
        from ember import SparkFiles
        with open(SparkFiles.get("data.txt")) as f:
            return f"{helper_mod_s3.f(x)} {f.read()}"
    assert s3_sc.parallelize([1, 2], 2).map(use).collect() == ["2 hello from s3",
                                                               "3 hello from s3"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("inner/v.txt", "9")
    client.put_object(Bucket=name, Key="deps/arch.zip", Body=buf.getvalue())
    s3_sc.addArchive(f"s3a://{name}/deps/arch.zip#unpacked")
    assert s3_sc.listArchives == [f"s3a://{name}/deps/arch.zip#unpacked"]
    assert not [f for f in os.listdir(s3_sc.runtime.local_dir) if f.startswith("archive-")]

    def read_archive(_):
        from ember import SparkFiles
        with open(SparkFiles.get("unpacked") + "/inner/v.txt") as f:
            return f.read()
    assert s3_sc.parallelize([0], 1).map(read_archive).collect() == ["9"]


def test_event_log_on_s3_redacted_and_read_by_the_history_server(fresh_sc, s3_keys, bucket):
    name, client = bucket
    conf = SparkConf().set("spark.ui.enabled", "false").set("spark.eventLog.enabled", "true") \
        .set("spark.eventLog.dir", f"s3a://{name}/events")
    for k, v in s3_keys.items():
        conf.set(k, v)
    sc = fresh_sc("local[2]", "logged-to-s3", conf)
    app_id = sc.applicationId
    assert keys_of(client, name, "events/") == [f"events/{app_id}.inprogress"]
    assert sc.parallelize(range(10), 2).count() == 10
    sc.stop()
    assert keys_of(client, name, "events/") == [f"events/{app_id}"]
    text = client.get_object(Bucket=name, Key=f"events/{app_id}")["Body"].read().decode()
    assert SECRET not in text and "AKIDTEST" not in text
    env = next(json.loads(line) for line in text.splitlines()
               if '"SparkListenerEnvironmentUpdate"' in line)
    assert env["Spark Properties"]["spark.hadoop.fs.s3a.secret.key"] == "*********(redacted)"
    assert env["Spark Properties"]["spark.hadoop.fs.s3a.access.key"] == "*********(redacted)"
    apps = _history_apps(f"s3a://{name}/events", s3_keys)
    assert [(a["id"], a["name"], a["attempts"][0]["completed"]) for a in apps] == [
        (app_id, "logged-to-s3", True)]


def _history_apps(log_dir: str, keys: dict) -> list:
    from ember.ui.history_server import HistoryServer
    server = HistoryServer(log_dir, keys)
    port = server.start("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/applications",
                                    timeout=30) as r:
            return json.loads(r.read())
    finally:
        server.stop()


def test_http_source_and_an_unknown_scheme(sc, tmp_path):
    """http(s) files are streamed from their start (no seek): text, a SequenceFile and a
    pickle file alike."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "a.txt").write_bytes(_text(300, 3))
    pairs = [(i, "v" * (i % 7)) for i in range(3000)]
    sc.parallelize(pairs, 1).saveAsSequenceFile(str(tmp_path / "site" / "seq"))
    sc.parallelize(pairs, 1).saveAsPickleFile(str(tmp_path / "site" / "pickle"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(tmp_path / "site"))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/a.txt"
        assert sc.textFile(url, 3).collect() == \
            sc.textFile(str(tmp_path / "site" / "a.txt"), 3).collect()
        site = url.rsplit("/", 1)[0]
        assert sc.sequenceFile(site + "/seq/part-00000", minSplits=3).collect() == pairs
        assert sc.pickleFile(site + "/pickle/part-00000", 3).collect() == pairs
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(Exception, match='No FileSystem for scheme "nosuch"'):
        sc.textFile("nosuch://x/y").count()


def test_spark_keys_map_to_fsspec_options():
    from ember import fs
    keys = {"spark.hadoop.fs.s3a.endpoint": "minio:9000",
            "spark.hadoop.fs.s3a.access.key": "A", "spark.hadoop.fs.s3a.secret.key": "S",
            "spark.hadoop.fs.s3a.session.token": "T",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.bucket.other.endpoint": "http://other:1",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1", "spark.app.name": "x"}
    assert fs.hadoop_conf(keys) == {k: v for k, v in keys.items() if k != "spark.app.name"}
    assert fs._s3_options(keys, "logs") == {
        "key": "A", "secret": "S", "token": "T",
        "client_kwargs": {"endpoint_url": "http://minio:9000", "region_name": "eu-west-1"},
        "config_kwargs": {"s3": {"addressing_style": "path"}}}
    assert fs._s3_options(keys, "other")["client_kwargs"]["endpoint_url"] == "http://other:1"
    assert fs._s3_options({"spark.hadoop.fs.s3a.endpoint": "h:1"}, "b") == {
        "client_kwargs": {"endpoint_url": "https://h:1"}}      # S3A's default: TLS
    anon = {"spark.hadoop.fs.s3a.aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"}
    assert fs._s3_options(anon, "b") == {"anon": True}
    assert [fs.scheme(p) for p in ("/a", "a:b", "file:/a", "file:///a", "S3A://b/k")] == \
        [None, None, "file", "file", "s3a"]
    assert fs.is_local("file:/x") and not fs.is_local("gs://b/x")
    assert fs.local_path("file://localhost/tmp/x") == "/tmp/x"


def test_listing_rules_through_fsspec_on_the_memory_filesystem():
    """memory:// lives in one process (tasks cannot see it): the listing, glob and hidden-
    file rules, checked on the driver side alone."""
    import fsspec

    from ember import fs
    from ember.rdd_sources import compute_file_splits, list_input_files
    mem = fsspec.filesystem("memory")
    root = "/ember-list-" + uuid.uuid4().hex[:8]
    for name, body in {"a.txt": b"x\n" * 10, "b.txt": b"y\n", "_SUCCESS": b"",
                       ".crc": b"z", "sub/c.txt": b"deep\n", "sub/_tmp/d.txt": b"no\n"}.items():
        mem.pipe_file(f"{root}/{name}", body)
    url = f"memory://{root}"
    assert list_input_files(url) == [(f"{url}/a.txt", 20), (f"{url}/b.txt", 2)]
    assert [f.path for f in list_input_files(url, recursive=True)] == [
        f"{url}/a.txt", f"{url}/b.txt", f"{url}/sub/c.txt"]
    assert [f.path for f in list_input_files(f"{url}/*.txt,{url}/sub")] == [
        f"{url}/a.txt", f"{url}/b.txt", f"{url}/sub/c.txt"]
    splits = compute_file_splits(list_input_files(url), 4)
    assert [(s.start, s.length) for s in splits] == [(0, 5), (5, 5), (10, 5), (15, 5), (0, 2)]
    assert fs.listdir(url) == [".crc", "_SUCCESS", "a.txt", "b.txt", "sub"]
    assert fs.join(url, "x") == f"{url}/x" and fs.display(url) == url


# --- a 2-worker cluster ------------------------------------------------------------------------
def test_cluster_executors_read_and_write_s3_with_the_apps_conf(cluster, fresh_sc, s3_keys,
                                                                bucket):
    name, client = bucket
    client.put_object(Bucket=name, Key="in/a.txt", Body=b"a b\nc\n" * 500)
    client.put_object(Bucket=name, Key="in/b.gz", Body=gzip.compress(b"d e f\n" * 300))
    conf = SparkConf().set("spark.ui.enabled", "false").set("spark.executor.cores", "1")
    for k, v in s3_keys.items():
        conf.set(k, v)
    sc = fresh_sc(cluster.url, "s3-cluster", conf)
    words = sc.textFile(f"s3a://{name}/in", 4).flatMap(str.split)
    assert words.count() == 3 * 500 + 3 * 300
    counts = words.map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b)
    counts.map(lambda kv: f"{kv[0]}\t{kv[1]}").saveAsTextFile(f"s3a://{name}/wc")
    back = dict(line.split("\t") for line in sc.textFile(f"s3a://{name}/wc").collect())
    assert back == {"a": "500", "b": "500", "c": "500", "d": "300", "e": "300", "f": "300"}
    assert keys_of(client, name, "wc/")[0] == "wc/_SUCCESS"
    assert not [k for k in keys_of(client, name, "wc/") if "_temporary" in k]


def test_cluster_mode_app_and_py_files_from_s3_with_event_log(cluster, s3_keys, bucket):
    name, client = bucket
    client.put_object(Bucket=name, Key="in/a.txt", Body=b"1\n2\n3\n")
    client.put_object(Bucket=name, Key="jobs/helper_s3_job.py",
                      Body=b"def double(x):\n    return 2 * int(x)\n")
    client.put_object(Bucket=name, Key="jobs/app.py", Body=textwrap.dedent(f"""
        import sys
        from ember import SparkContext
        import helper_s3_job
        sc = SparkContext(appName="from-s3")
        rdd = sc.textFile("s3a://{name}/in").map(helper_s3_job.double)
        rdd.saveAsTextFile(sys.argv[1])
        print("TOTAL", rdd.sum())
        sc.stop()
        """).encode())
    conf_args = [a for k, v in s3_keys.items() for a in ("--conf", f"{k}={v}")]
    r = _ember("submit", "--master", cluster.url, "--deploy-mode", "cluster", "--follow",
               *conf_args, "--conf", "spark.eventLog.enabled=true",
               "--conf", f"spark.eventLog.dir=s3a://{name}/events",
               "--py-files", f"s3://{name}/jobs/helper_s3_job.py",
               f"s3://{name}/jobs/app.py", f"s3a://{name}/out")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "TOTAL 12" in r.stdout
    assert SECRET not in r.stdout + r.stderr
    out = client.get_object(Bucket=name, Key="out/part-00000")["Body"].read()
    assert "_SUCCESS" in str(keys_of(client, name, "out/")) and out
    apps = _history_apps(f"s3a://{name}/events", s3_keys)
    assert [a["name"] for a in apps] == ["from-s3"] and apps[0]["attempts"][0]["completed"]


def test_client_mode_app_from_s3_with_credentials_from_the_aws_environment(bucket,
                                                                           s3_endpoint):
    name, client = bucket
    client.put_object(Bucket=name, Key="jobs/dep_client_s3.py", Body=b"VALUE = 21\n")
    client.put_object(Bucket=name, Key="jobs/app.py", Body=textwrap.dedent("""
        from ember import SparkContext
        import dep_client_s3
        sc = SparkContext(appName="client-s3")
        print("ANSWER", sc.parallelize([dep_client_s3.VALUE], 1).map(lambda x: x * 2).first())
        sc.stop()
        """).encode())
    env = {"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_ENDPOINT_URL": s3_endpoint, "AWS_DEFAULT_REGION": "us-east-1"}
    r = _ember("submit", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
               "--py-files", f"s3://{name}/jobs/dep_client_s3.py", f"s3://{name}/jobs/app.py",
               env=env)
    assert r.returncode == 0, r.stderr
    assert "ANSWER 42" in r.stdout
    missing = _ember("submit", "--master", "local[1]", f"s3://{name}/jobs/none.py", env=env)
    assert missing.returncode == 1 and "none.py" in missing.stderr


def _ember(*args: str, env: dict | None = None, timeout: float = 180):
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=_env(env))


@pytest.mark.parametrize("chunk,tail", [(32 << 20, 64 << 10), (7, 3), (1, 1), (50, 5)])
def test_range_reads_own_the_same_lines_as_local_reads(tmp_path, monkeypatch, chunk, tail):
    """Hadoop's rule - a line belongs to the split where it starts - holds for range
    requests of any size (memory:// runs them in this process), including lines longer
    than a request and split ends right after a newline."""
    import fsspec

    from ember import rdd_sources
    from ember.rdd_sources import FileSplit, read_lines
    monkeypatch.setattr(rdd_sources, "_REMOTE_CHUNK", chunk)
    monkeypatch.setattr(rdd_sources, "_TAIL", tail)
    rnd = random.Random(chunk)
    data = b"".join(b"x" * rnd.choice([0, 1, 2, 5, 40]) + rnd.choice([b"\n", b"\r\n"])
                    for _ in range(120)) + b"no newline at the end"
    local = tmp_path / "f.txt"
    local.write_bytes(data)
    url = f"memory://ember-ranges-{uuid.uuid4().hex[:8]}/f.txt"
    fsspec.filesystem("memory").pipe_file(url, data)
    for split_size in (1, 2, 3, 7, 33, 200, len(data)):
        starts = range(0, len(data), split_size)
        remote = [list(read_lines(FileSplit(i, url, s, min(split_size, len(data) - s))))
                  for i, s in enumerate(starts)]
        disk = [list(read_lines(FileSplit(i, str(local), s, min(split_size, len(data) - s))))
                for i, s in enumerate(starts)]
        assert remote == disk, split_size
        assert [x for part in remote for x in part] == data.decode().splitlines()


@pytest.mark.parametrize("piece,tail", [(4 << 20, 64 << 10), (7, 3), (1, 1)])
def test_direct_s3_range_reads_own_the_same_lines_as_local_reads(tmp_path, monkeypatch,
                                                                 s3_keys, bucket, piece, tail):
    """The direct S3 road (plain HTTP range GETs into a reused buffer) keeps Hadoop's rule for
    any buffer and tail size, as the fsspec road does above."""
    from ember import fs, rdd_sources, s3_range
    from ember.rdd_sources import FileSplit, read_lines
    monkeypatch.setattr(rdd_sources, "_CHUNK", piece)
    monkeypatch.setattr(rdd_sources, "_TAIL", tail)
    monkeypatch.setattr(rdd_sources, "_BUFFERS", [])
    monkeypatch.setattr(fs, "_process_conf", fs.hadoop_conf(s3_keys))
    name, client = bucket
    rnd = random.Random(piece)
    data = b"".join(b"x" * rnd.choice([0, 1, 2, 5, 40]) + rnd.choice([b"\n", b"\r\n"])
                    for _ in range(50)) + b"no newline at the end"   # ~100 splits of 7 bytes
    local = tmp_path / "f.txt"
    local.write_bytes(data)
    client.put_object(Bucket=name, Key="d/f.txt", Body=data)
    url = f"s3a://{name}/d/f.txt"
    assert s3_range.reader(url) is not None
    for split_size in (7, 33, 200, len(data)):
        starts = range(0, len(data), split_size)
        remote = [list(read_lines(FileSplit(i, url, s, min(split_size, len(data) - s)), False))
                  for i, s in enumerate(starts)]
        disk = [list(read_lines(FileSplit(i, str(local), s, min(split_size, len(data) - s)),
                                False)) for i, s in enumerate(starts)]
        assert remote == disk, split_size
        assert [x for part in remote for x in part] == data.splitlines()


def test_direct_s3_reads_sign_like_botocore_and_fail_without_secrets(monkeypatch, s3_keys,
                                                                    bucket):
    """Signature V4 headers equal botocore's for the same request and time; anonymous reads
    are unsigned; a missing object, an unreachable endpoint and a dropped connection give
    errors that name the URL and no key."""
    import datetime

    import botocore.auth
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.credentials import Credentials

    from ember import fs, s3_range
    now = datetime.datetime(2026, 12, 1, 21, 30, 5, tzinfo=datetime.timezone.utc)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now.replace(tzinfo=None))
    for token in (None, "tok/en+="):
        ours = s3_range.sigv4_headers(("AKIDTEST", SECRET, token), "eu-west-3",
                                      "127.0.0.1:9000", "/b/dir/a%20b%2Bc.txt", now)
        request = AWSRequest(method="GET", url="https://127.0.0.1:9000/b/dir/a%20b%2Bc.txt")
        request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
        S3SigV4Auth(Credentials("AKIDTEST", SECRET, token), "s3", "eu-west-3").add_auth(request)
        assert ours["Authorization"] == request.headers["Authorization"]
        assert ours["x-amz-date"] == request.headers["X-Amz-Date"]
    name, client = bucket
    client.put_object(Bucket=name, Key="a.txt", Body=b"one\ntwo\n", ACL="public-read")
    client.put_object(Bucket=name, Key="private.txt", Body=b"no\n")
    anon = {k: v for k, v in s3_keys.items() if "key" not in k}
    anon["spark.hadoop.fs.s3a.aws.credentials.provider"] = \
        "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"
    monkeypatch.setattr(fs, "_process_conf", fs.hadoop_conf(anon))
    reader = s3_range.reader(f"s3a://{name}/a.txt")
    assert reader is not None and "Authorization" not in reader._headers("h", 80, "/", 0, 1)
    buf = bytearray(3)
    assert [bytes(buf[:n]) for n in reader.stream(0, 100, buf)][-1] == b"o\n"
    assert reader.size == 8
    with pytest.raises(PermissionError, match=f"s3a://{name}/private.txt") as denied:
        list(s3_range.reader(f"s3a://{name}/private.txt").stream(0, 10, buf))
    monkeypatch.setattr(fs, "_process_conf", fs.hadoop_conf(s3_keys))
    assert fs.s3_settings(name).secret == SECRET and SECRET not in repr(fs.s3_settings(name))
    with pytest.raises(FileNotFoundError, match=f"s3a://{name}/gone.txt") as missing:
        list(s3_range.reader(f"s3a://{name}/gone.txt").stream(0, 10, buf))
    closed = dict(s3_keys, **{"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9"})
    monkeypatch.setattr(fs, "_process_conf", fs.hadoop_conf(closed))
    monkeypatch.setattr(s3_range, "_RETRY_PAUSE", 0.01)
    with pytest.raises(OSError, match=f"s3a://{name}/a.txt") as unreachable:
        list(s3_range.reader(f"s3a://{name}/a.txt").stream(0, 10, buf))
    for e in (denied.value, missing.value, unreachable.value):
        assert SECRET not in str(e) and "AKIDTEST" not in str(e)


def test_direct_s3_read_resumes_after_a_dropped_connection(monkeypatch, s3_keys):
    """A server that drops the connection half way through a body: the read goes on from
    the byte it reached with a new request, and ends with the right bytes; a server that
    answers a range from 0 with the whole object is read as far as asked."""
    from ember import fs, s3_range
    body = bytes(range(256)) * 40
    seen: list[str] = []

    class Flaky(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.endswith("/whole.bin"):      # a server that ignores Range
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            first, last = (int(x) for x in
                           self.headers["Range"].split("=")[1].split("-"))
            last = min(last, len(body) - 1)
            seen.append(f"{first}-{last}")
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(body)}")
            self.send_header("Content-Length", str(last - first + 1))
            self.end_headers()
            part = body[first:last + 1]
            self.wfile.write(part if len(seen) > 1 else part[:1000])
            if len(seen) == 1:
                self.close_connection = True

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conf = dict(s3_keys, **{"spark.hadoop.fs.s3a.endpoint":
                                f"http://127.0.0.1:{server.server_port}"})
        monkeypatch.setattr(fs, "_process_conf", fs.hadoop_conf(conf))
        monkeypatch.setattr(s3_range, "_RETRY_PAUSE", 0.01)
        buf = bytearray(4096)
        got = b"".join(bytes(buf[:n]) for n in
                       s3_range.reader("s3a://bkt/k.bin").stream(0, 1 << 20, buf))
        assert got == body and seen[0] == f"0-{len(body) - 1}"
        assert seen[1].startswith("1000-")
        whole = s3_range.reader("s3a://bkt/whole.bin")
        assert b"".join(bytes(buf[:n]) for n in whole.stream(0, 5000, buf)) == body[:5000]
        assert whole.size == len(body)
    finally:
        server.shutdown()
        server.server_close()
