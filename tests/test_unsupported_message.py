"""One error for a message an endpoint does not handle: every endpoint answers an ask it
does not take with `UnsupportedMessageError` ("Unsupported message <Type> from <sender>", as
Spark's Inbox words it), over real sockets on 127.0.0.1.

The endpoints are the daemons' and applications' real classes, each on its own RpcEnv: the
master (a whole in-process master daemon), the driver's scheduler endpoint, the executor
backend, the worker's external shuffle service, and the RpcEndpoint default. (The worker's
own endpoint is covered by its state machine's tests.)
"""
from __future__ import annotations

import pytest

from ember.deploy.master.master import start_master
from ember.deploy.worker.shuffle_service import ShuffleServiceEndpoint
from ember.executor.backend import CoarseGrainedExecutorBackend
from ember.rpc import (CheckExistence, RpcEndpoint, RpcEnv, RpcRemoteError,
                       UnsupportedMessageError)
from ember.scheduler.standalone_backend import DriverEndpoint

CONF = {"spark.rpc.connect.timeout": "5s"}


@pytest.fixture
def client():
    env = RpcEnv.create("client", "127.0.0.1", 0, CONF, client_mode=True)
    yield env
    env.shutdown()


@pytest.fixture
def server():
    env = RpcEnv.create("server", "127.0.0.1", 0, CONF)
    yield env
    env.shutdown()


def assert_unsupported(ref) -> None:
    with pytest.raises(RpcRemoteError) as ei:
        ref.ask_sync(CheckExistence("anything"), timeout=20)
    assert ei.value.remote_type == UnsupportedMessageError.__name__, ei.value
    assert ei.value.remote_message.startswith("Unsupported message CheckExistence from ")


def test_every_endpoint_answers_an_unsupported_ask_with_the_same_error(client, server,
                                                                       tmp_path):
    master = start_master("127.0.0.1", 0, 0, {**CONF, "spark.master.rest.enabled": "false"})
    try:
        refs = [client.endpoint_ref(master.rpc_env.address, "Master")]
        endpoints = {
            "driver": DriverEndpoint(backend=None),   # its refusal needs no backend
            "executor": CoarseGrainedExecutorBackend(
                "1", "127.0.0.1", 1, "app-1", server.address, None, {}, str(tmp_path)),
            "shuffle-service": ShuffleServiceEndpoint(),
            "plain": RpcEndpoint(),
        }
        for name, endpoint in endpoints.items():
            server.setup_endpoint(name, endpoint)
            refs.append(client.endpoint_ref(server.address, name))
        for ref in refs:
            assert_unsupported(ref)
    finally:
        master.stop()
