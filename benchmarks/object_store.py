"""Reading text from an S3-compatible server against reading the same files from local disk:
`textFile(dir).count()` on local[2], throughput in MB/s (target: S3 within 1.5x of disk).

The data (plain text lines of 40-120 bytes, in files of --file-mb) is generated once into a
temporary directory, uploaded to moto's S3 server (`moto_server`, a separate process on a
free loopback port, so it does not share the driver's GIL), read --runs times from each
source alternately, and deleted at the end. The server runs on the same cores as the
benchmark, so its CPU time (printed) is part of what the S3 reads cost here. Run it by
hand, once:

    python -m benchmarks.object_store [--size-mb 1024] [--file-mb 64] [--runs 2]
                                      [--moto-keep-heap]
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

KEY, SECRET, BUCKET = "bench-key", "bench-secret", "ember-bench"


def generate(directory: str, size_mb: int, file_mb: int) -> int:
    """Files of about file_mb MB each (the last one shorter) adding up to size_mb; bytes."""
    rnd = random.Random(7)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9)))
             for _ in range(5000)]
    block = "".join(" ".join(rnd.choices(words, k=rnd.randint(6, 18))) + "\n"
                    for _ in range(20000)).encode()
    total, i, left = 0, 0, size_mb << 20
    while left > 0:
        want = min(file_mb << 20, left)
        data = (block * (want // len(block) + 1))[:want]
        data = data[:data.rfind(b"\n") + 1]
        with open(os.path.join(directory, f"part-{i:05d}.txt"), "wb") as f:
            f.write(data)
        total += len(data)
        left -= want
        i += 1
    return total


def start_server(keep_heap: bool = False) -> tuple[subprocess.Popen, str]:
    from ember.deploy.local_cluster import free_port
    port = free_port()
    server = os.path.join(os.path.dirname(sys.executable), "moto_server")
    # objects stay in the server's memory (moto spills any object over 5 MB to a temp file
    # and reads all of it back for every range request): the benchmark measures Ember's
    # reading, not moto's storage
    env = dict(os.environ, MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=str(256 << 20))
    if keep_heap:
        # moto copies the whole object (and then the range) for every range GET; glibc maps
        # each copy afresh and the kernel zero-fills it page by page (~1.5 s of the server's
        # ~1.9 s of CPU per GB). Told to keep its heap, moto reuses that memory.
        env.update(MALLOC_MMAP_THRESHOLD_=str(1 << 32), MALLOC_TRIM_THRESHOLD_=str(1 << 32),
                   MALLOC_ARENA_MAX="1")
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
            return proc, url
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("moto_server did not start")
            time.sleep(0.1)


def upload(endpoint: str, directory: str) -> None:
    import boto3
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY,
                      aws_secret_access_key=SECRET, region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    for name in sorted(os.listdir(directory)):
        s3.upload_file(os.path.join(directory, name), BUCKET, f"data/{name}")


def timed_count(sc, path: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = sc.textFile(path).count()
    return time.perf_counter() - t0, n


def tree_cpu(proc, exclude: int = 0) -> float:
    """CPU seconds of a process and its live descendants but `exclude` (the driver and its
    task processes, not the S3 server it started; or the S3 server)."""
    total = 0.0
    for p in [proc] + proc.children(recursive=True):
        if p.pid == exclude:
            continue
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except Exception:        # a process that just ended
            pass
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.object_store")
    p.add_argument("--size-mb", type=int, default=1024)
    p.add_argument("--file-mb", type=int, default=64)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--moto-keep-heap", action="store_true",
                   help="run moto with glibc keeping its heap (see start_server)")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    from ember import SparkConf, SparkContext
    tmp = tempfile.mkdtemp(prefix="ember-s3-bench-")
    proc = None
    try:
        data_dir = os.path.join(tmp, "data")
        os.makedirs(data_dir)
        total = generate(data_dir, args.size_mb, args.file_mb)
        proc, endpoint = start_server(args.moto_keep_heap)
        t0 = time.perf_counter()
        upload(endpoint, data_dir)
        print(f"{total / 1e6:.0f} MB in {len(os.listdir(data_dir))} files, uploaded in "
              f"{time.perf_counter() - t0:.1f} s; load average %.2f %.2f %.2f"
              % os.getloadavg(), flush=True)
        conf = (SparkConf().setMaster("local[2]").setAppName("object-store-bench")
                .set("spark.ui.enabled", "false")
                .set("spark.hadoop.fs.s3a.endpoint", endpoint)
                .set("spark.hadoop.fs.s3a.access.key", KEY)
                .set("spark.hadoop.fs.s3a.secret.key", SECRET)
                .set("spark.hadoop.fs.s3a.path.style.access", "true"))
        sc = SparkContext(conf=conf)
        try:
            import psutil
            server, me = psutil.Process(proc.pid), psutil.Process()
            times: dict[str, list[float]] = {"local disk": [], "S3 (moto)": []}
            server_cpu: dict[str, list[float]] = {"local disk": [], "S3 (moto)": []}
            ember_cpu: dict[str, list[float]] = {"local disk": [], "S3 (moto)": []}
            counts = set()
            for _ in range(args.runs):
                for label, path in (("local disk", data_dir), ("S3 (moto)",
                                                               f"s3a://{BUCKET}/data")):
                    cpu0, own0 = tree_cpu(server), tree_cpu(me, proc.pid)
                    seconds, n = timed_count(sc, path)
                    server_cpu[label].append(tree_cpu(server) - cpu0)
                    ember_cpu[label].append(tree_cpu(me, proc.pid) - own0)
                    times[label].append(seconds)
                    counts.add(n)
                    print(f"  {label}: {seconds:.2f} s, {total / 1e6 / seconds:.0f} MB/s; CPU: "
                          f"Ember {ember_cpu[label][-1]:.2f} s, S3 server "
                          f"{server_cpu[label][-1]:.2f} s", flush=True)
            if len(counts) != 1:
                raise RuntimeError(f"line counts differ: {counts}")
        finally:
            sc.stop()
        med = {k: statistics.median(v) for k, v in times.items()}
        print("load average (1, 5, 15 min): %.2f %.2f %.2f" % os.getloadavg())
        for label, seconds in med.items():
            print(f"{label}: median {seconds:.2f} s = {total / 1e6 / seconds:.0f} MB/s, "
                  f"CPU {statistics.median(ember_cpu[label]):.2f} s Ember + "
                  f"{statistics.median(server_cpu[label]):.2f} s server")
        print(f"S3 / local disk time: {med['S3 (moto)'] / med['local disk']:.2f}x "
              "(target <= 1.5x)")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
