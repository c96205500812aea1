"""Block migration of a decommissioning executor (ember.executor.decommission) when peers
drain too or fail: the sending side against fake peers, the receiving side's refusal over a
real RPC connection."""
from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from ember.deploy.executor_messages import BlockManagerPeer, GetPeers, PutMigratedBlock
from ember.executor.backend import CoarseGrainedExecutorBackend
from ember.executor.decommission import (BlockSavedOnDecommissionedBlockManagerException,
                                         migrate_blocks)
from ember.rpc import RpcEnv, RpcRemoteError

REFUSED = BlockSavedOnDecommissionedBlockManagerException.__name__


class FakePeer:
    """An executor's endpoint ref: keeps the blocks it accepts; refuses them once it
    drains, or fails the first `fails` uploads."""

    def __init__(self, name: str, draining: bool = False, fails: int = 0) -> None:
        self.address = name
        self.draining = draining
        self.fails = fails
        self.asked = 0
        self.blocks: list[str] = []

    def ask_sync(self, msg: PutMigratedBlock, timeout: float) -> bool:
        self.asked += 1
        if self.draining:
            raise RpcRemoteError(REFUSED, f"Block {msg.blockId} cannot be saved")
        if self.fails:
            self.fails -= 1
            raise RpcRemoteError("OSError", "No space left on device")
        if msg.last:
            self.blocks.append(msg.blockId)
        return True


@dataclass
class FakeBackend:
    """What migrate_blocks uses of an executor backend; the driver names peers in turn
    from `answers` (the last one again once they run out)."""
    work_dir: str
    peers: dict[str, FakePeer]
    answers: list[list[str]]
    executor_id: str = "9"
    pool: None = None

    def __post_init__(self) -> None:
        self.driver = self
        self.rpc_env = self
        self.peer_asks = 0

    def ask_sync(self, msg: GetPeers, timeout: float) -> list[BlockManagerPeer]:
        names = self.answers[min(self.peer_asks, len(self.answers) - 1)]
        self.peer_asks += 1
        return [BlockManagerPeer(n, n, 1) for n in names]

    def endpoint_ref(self, address, name: str) -> FakePeer:
        return self.peers[address.host]


def backend_with_blocks(tmp_path, peers, answers, n=4) -> FakeBackend:
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    for i in range(n):
        (blocks / f"rdd_1_{i}").write_bytes(b"x" * 10)
    return FakeBackend(str(tmp_path), {p.address: p for p in peers}, answers)


def test_a_peer_that_drains_too_refuses_and_its_blocks_go_to_the_others(tmp_path):
    a, draining, b = FakePeer("a"), FakePeer("d", draining=True), FakePeer("b")
    backend = backend_with_blocks(tmp_path, [a, draining, b], [["a", "d", "b"]])
    migrate_blocks(backend, shuffle=True, rdd=True, max_failures=1)
    assert sorted(a.blocks + b.blocks) == [f"rdd_1_{i}" for i in range(4)]
    assert draining.asked == 1 and not draining.blocks     # then no more blocks there


def test_a_failing_peer_gets_no_more_blocks_and_a_block_fails_at_most_max_failures_times(
        tmp_path):
    bad, good = FakePeer("bad", fails=1), FakePeer("good")
    backend = backend_with_blocks(tmp_path, [bad, good], [["bad", "good"]])
    migrate_blocks(backend, shuffle=False, rdd=True, max_failures=3)
    assert good.blocks == [f"rdd_1_{i}" for i in range(4)] and bad.asked == 1

    # the only peer keeps failing: asked again, the driver names it again; it fails a
    # second time and no peer is left for the rest
    (tmp_path / "again").mkdir()
    broken = FakePeer("broken", fails=100)
    backend = backend_with_blocks(tmp_path / "again", [broken], [["broken"]], n=2)
    migrate_blocks(backend, shuffle=False, rdd=True, max_failures=3)
    assert (broken.asked, backend.peer_asks, broken.blocks) == (2, 2, [])

    # three failures of one block, on three peers, give it up; the next block goes on
    (tmp_path / "three").mkdir()
    peers = [FakePeer(n, fails=1) for n in "xyz"] + [FakePeer("w")]
    backend = backend_with_blocks(tmp_path / "three", peers, [["x", "y", "z", "w"]], n=2)
    migrate_blocks(backend, shuffle=False, rdd=True, max_failures=3)
    assert [p.asked for p in peers] == [1, 1, 1, 1] and peers[3].blocks == ["rdd_1_1"]


def test_when_every_peer_refuses_the_driver_is_asked_again(tmp_path):
    first, later = FakePeer("first", draining=True), FakePeer("later")
    backend = backend_with_blocks(tmp_path, [first, later], [["first"], ["later"]])
    migrate_blocks(backend, shuffle=False, rdd=True, max_failures=1)
    assert later.blocks == [f"rdd_1_{i}" for i in range(4)] and backend.peer_asks == 2


def test_no_peer_left_gives_up_the_rest_without_waiting_per_block(tmp_path, monkeypatch):
    monkeypatch.setattr("ember.executor.decommission.PEER_WAIT", 0.0)
    only = FakePeer("only", draining=True)
    backend = backend_with_blocks(tmp_path, [only], [["only"], []])
    migrate_blocks(backend, shuffle=False, rdd=True, max_failures=3)
    assert only.asked == 1 and backend.peer_asks == 2


def test_a_block_deleted_meanwhile_is_skipped_and_its_peer_kept(tmp_path):
    class Deleting(FakePeer):
        def ask_sync(self, msg, timeout):
            if msg.blockId == "rdd_1_0":
                os.unlink(tmp_path / "blocks" / "rdd_1_0")     # unpersisted under us
                raise RpcRemoteError("FileNotFoundError", "gone")
            return super().ask_sync(msg, timeout)

    peer = Deleting("p")
    backend = backend_with_blocks(tmp_path, [peer], [["p"]], n=3)
    migrate_blocks(backend, shuffle=False, rdd=True, max_failures=1)
    assert peer.blocks == ["rdd_1_1", "rdd_1_2"]


@pytest.fixture
def executor(tmp_path):
    """An executor endpoint on a real RpcEnv, and a client's ref to it."""
    server = RpcEnv.create("server", "127.0.0.1", 0, {})
    client = RpcEnv.create("client", "127.0.0.1", 0, {}, client_mode=True)
    backend = CoarseGrainedExecutorBackend("1", "127.0.0.1", 1, "app-1", server.address, None,
                                           {}, str(tmp_path))
    server.setup_endpoint("Executor", backend)
    try:
        yield backend, client.endpoint_ref(server.address, "Executor")
    finally:
        client.shutdown()
        server.shutdown()


def test_an_executor_that_drains_refuses_migrated_blocks(executor, tmp_path):
    backend, ref = executor
    os.makedirs(tmp_path / "blocks")
    assert ref.ask_sync(PutMigratedBlock("rdd_1_0", 0, b"first chunk", False), 20) is True
    backend.decommissioning = True
    with pytest.raises(RpcRemoteError) as ei:       # the next chunk, or another block
        ref.ask_sync(PutMigratedBlock("rdd_1_0", 11, b"second chunk", False), 20)
    assert ei.value.remote_type == REFUSED
    assert not os.path.exists(tmp_path / "blocks" / "rdd_1_0")
    assert backend._blocks_arriving == 0
