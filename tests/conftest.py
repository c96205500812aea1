"""Shared fixtures: one local context per session, a fresh one for tests that need it, and
a 2-worker cluster per module that asks for one."""
from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("PYTHONHASHSEED", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ember import SparkContext  # noqa: E402


def _stop_active() -> None:
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()


_shared: list = []


@pytest.fixture
def sc():
    """The shared local[2] context, recreated if a test stopped it (cheap to reuse)."""
    if not _shared or _shared[0].runtime.stopped:
        _stop_active()
        _shared[:] = [SparkContext("local[2]", "ember-tests")]
    return _shared[0]


def pytest_sessionfinish(session, exitstatus):
    _stop_active()


@pytest.fixture
def fresh_sc():
    """A factory for contexts with their own master/conf; stops them after the test."""
    created = []
    saved = SparkContext._active_spark_context
    if saved is not None:
        saved.stop()

    def make(master: str = "local[2]", app: str = "ember-fresh", conf=None):
        ctx = SparkContext(master, app, conf=conf)
        created.append(ctx)
        return ctx

    yield make
    for ctx in created:
        ctx.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 2-worker standalone cluster on 127.0.0.1, one per test module that asks for it."""
    from ember.deploy.local_cluster import LocalCluster
    c = LocalCluster(str(tmp_path_factory.mktemp("cluster")), workers=2, cores=2,
                     conf={"spark.worker.timeout": "3"})
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A real ZooKeeper server on a free loopback port for the whole session (Debian's
    zookeeper package, installed by `make test`); `.outage(s)` stops it for s seconds."""
    from ember.deploy.local_zookeeper import LocalZooKeeper
    server = LocalZooKeeper(str(tmp_path_factory.mktemp("zookeeper"))).start()
    yield server
    server.destroy()
