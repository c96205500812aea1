"""Outbound routing: the one connection per remote address, and the asks awaiting replies.

Spark's Outbox: messages to an address whose connection is not up yet wait here in order
and are written once it is; a failed connect fails what waited (asks get the error, sends
are logged) and the next message tries again.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from typing import Awaitable, Callable

from ember.rpc.address import RpcAddress
from ember.rpc.errors import RpcConnectionError
from ember.rpc.transport import Channel


class PendingAsk:
    """An ask in flight: its future, timeout timer and the channel it was written to."""

    __slots__ = ("req_id", "future", "timer", "channel", "address", "timeout")

    def __init__(self, req_id: int, future: concurrent.futures.Future, address: RpcAddress,
                 timeout: float) -> None:
        self.req_id = req_id
        self.future = future
        self.timer: asyncio.TimerHandle | None = None
        self.channel: Channel | None = None
        self.address = address
        self.timeout = timeout


# An item waiting for the connection: (frame kind, endpoint name, encoded body, ask or None)
Queued = tuple[int, str, bytes, "PendingAsk | None"]


class Outbox:
    """The one outbound connection to a remote address, and what waits for it.

    `connect(address)` opens a channel (the transport's), `write(channel, *item)` writes
    one item, `fail(address, items, exc, quiet)` fails items that cannot go."""

    __slots__ = ("address", "channel", "queue", "task", "_loop", "_connect", "_write",
                 "_fail")

    def __init__(self, address: RpcAddress, loop: asyncio.AbstractEventLoop,
                 connect: Callable[[RpcAddress], Awaitable[Channel]],
                 write: Callable[..., None],
                 fail: Callable[[RpcAddress, list, BaseException, bool], None]) -> None:
        self.address = address
        self.channel: Channel | None = None
        self.queue: deque[Queued] = deque()
        self.task: asyncio.Task | None = None
        self._loop = loop
        self._connect = connect
        self._write = write
        self._fail = fail

    def post(self, kind: int, name: str, body: bytes, pending: PendingAsk | None) -> None:
        ch = self.channel
        if ch is not None and not ch.closed:
            self._write(ch, kind, name, body, pending)
            return
        self.channel = None
        self.queue.append((kind, name, body, pending))
        if self.task is None:
            self.task = self._loop.create_task(self._open())

    async def _open(self) -> None:
        try:
            ch = await self._connect(self.address)
            if ch.closed:
                raise RpcConnectionError(f"Connection to {self.address} closed during set-up")
        except Exception as e:
            self.task = None
            items = list(self.queue)
            self.queue.clear()
            self._fail(self.address, items, e, False)
            return
        self.task = None
        self.channel = ch
        while self.queue and not ch.closed:
            self._write(ch, *self.queue.popleft())
        if self.queue:  # closed while flushing: try again with what is left
            self.task = self._loop.create_task(self._open())

    def abort(self, exc: Exception) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        items = list(self.queue)
        self.queue.clear()
        self._fail(self.address, items, exc, True)

    def idle(self) -> bool:
        """Nothing waits and no connect is under way: the outbox may be forgotten."""
        return not self.queue and self.task is None

