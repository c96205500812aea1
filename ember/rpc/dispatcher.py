"""Routing to endpoints: one `Inbox` per endpoint, the `Dispatcher` that delivers to them.

Spark's Dispatcher and Inbox, on the env's loop thread: an endpoint gets its messages one
at a time, after its on_start, never after its on_stop; what arrives before on_start ran
waits in its inbox's backlog.

Why callbacks are transactions: a callback that raises half-way must not leave half its
effects in the world (a handler that queued two sends and then failed would otherwise
have told one peer something the endpoint never finished deciding). So everything a
callback issues on the loop thread - sends, asks, replies - is held while it runs and
released, in order and exactly as it would have gone out, when it returns; if it raises,
the held effects are dropped (its asks fail, its replies are withdrawn) and an ask it was
handling is failed with the exception instead.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from ember.rpc.endpoint import PeerInfo, RpcCallContext, RpcEndpoint, RpcEndpointRef, describe
from ember.rpc.errors import RpcError, RpcRemoteError

if TYPE_CHECKING:
    import asyncio

    from ember.rpc.outbox import PendingAsk

log = logging.getLogger("ember.rpc")

SLOW_CALLBACK_SECONDS = 2.0

# What is delivered to an endpoint.
RECEIVE, ASK, CONNECTED, DISCONNECTED, NETWORK_ERROR = range(5)


class Inbox:
    """An endpoint's registration: started/stopped flags and the backlog before on_start."""

    __slots__ = ("name", "endpoint", "ref", "started", "stopped", "backlog")

    def __init__(self, name: str, endpoint: RpcEndpoint, ref: RpcEndpointRef) -> None:
        self.name = name
        self.endpoint = endpoint
        self.ref = ref
        self.started = False
        self.stopped = False
        self.backlog: deque | None = deque()


# One send, ask or reply issued by a running callback and not yet let out:
# (fn, args, pending, context). A reply (`context` set: the ask it answers) runs `fn` at
# release, as an answer is written at once; a send or ask is scheduled on the loop, as it
# always goes out a turn later. If dropped, `pending`'s ask fails and `context`'s reply is
# withdrawn.
HeldEffect = tuple[Callable, tuple, "PendingAsk | None", "RpcCallContext | None"]


def not_found(name: str) -> RpcRemoteError:
    return RpcRemoteError("SparkException", f"Could not find {name}.")


def app_refusal(inbox: Inbox, scope: str | None, peer: Any, msg: Any) -> str:
    """Why `msg` from a connection that authenticated as application `scope` is refused by
    this endpoint ("" if it is not)."""
    allowed = inbox.endpoint.app_messages
    if scope is None or allowed is None or isinstance(msg, allowed):
        return ""
    return (f"{describe(msg)} from {peer}: the connection authenticated as application "
            f"{scope!r}, and {inbox.name} takes it only from the cluster's daemons")


class Dispatcher:
    """The endpoints of one env and the delivery of everything to them (loop thread only,
    except the registry, which `lock` guards for registration from other threads)."""

    def __init__(self, env_name: str, loop: "asyncio.AbstractEventLoop",
                 schedule: Callable[[Callable, tuple], None] | None = None) -> None:
        self.env_name = env_name
        self.loop = loop
        # how a released send or ask is scheduled on the loop (the env counts them)
        self.schedule = schedule or (lambda fn, args: loop.call_soon(fn, *args))
        self.inboxes: dict[str, Inbox] = {}
        self.current: PeerInfo | None = None   # sender of the one-way message being handled
        self.held: list[HeldEffect] | None = None   # effects of the running callback

    # -- delivery ---------------------------------------------------------------------------

    def deliver(self, inbox: Inbox, kind: int, a: Any, b: Any,
                info: PeerInfo | None = None) -> None:
        if inbox.stopped:
            if kind == ASK:
                b.answer(False, not_found(inbox.name))
            elif kind == RECEIVE:
                log.warning("Dropping %s from %s: Could not find %s.", describe(a), b,
                            inbox.name)
            return
        if not inbox.started:
            inbox.backlog.append((kind, a, b, info))  # type: ignore[union-attr]
            return
        self.invoke(inbox, kind, a, b, info)

    def post_all(self, kind: int, a: Any, b: Any = None) -> None:
        for inbox in list(self.inboxes.values()):
            self.deliver(inbox, kind, a, b)

    def start(self, inbox: Inbox) -> None:
        """Run on_start, then what waited for it."""
        if inbox.stopped:
            return
        self.call_endpoint(inbox, "on_start", inbox.endpoint.on_start)
        backlog = inbox.backlog
        while backlog and not inbox.stopped:
            kind, a, b, info = backlog.popleft()
            self.invoke(inbox, kind, a, b, info)
        inbox.started = True
        inbox.backlog = None

    def stop(self, inbox: Inbox) -> None:
        if inbox.started:
            inbox.started = False
            self.call_endpoint(inbox, "on_stop", inbox.endpoint.on_stop)

    def invoke(self, inbox: Inbox, kind: int, a: Any, b: Any,
               info: PeerInfo | None = None) -> None:
        ep = inbox.endpoint
        if kind == RECEIVE:
            self.current = info
            try:
                error = self.run_held(inbox, lambda: f"receive({describe(a)})", ep.receive, a, b)
            finally:
                self.current = None
            if error is not None:
                self.log_failure(inbox, lambda: f"receive({describe(a)})", error)
        elif kind == ASK:
            error = self.run_held(inbox, lambda: f"receive_and_reply({describe(a)})",
                                  ep.receive_and_reply, a, b)
            if error is not None:
                # An exception from receive_and_reply fails the ask (as Spark's Inbox does).
                log.warning("Endpoint %s failed an ask %s from %s: %s: %s", inbox.name,
                            describe(a), b.sender_address, type(error).__name__, error,
                            exc_info=log.isEnabledFor(logging.DEBUG))
                if not b.answered:
                    b.send_failure(error)
        elif kind == CONNECTED:
            self.call_endpoint(inbox, "on_connected", ep.on_connected, a)
        elif kind == DISCONNECTED:
            self.call_endpoint(inbox, "on_disconnected", ep.on_disconnected, a)
        else:
            self.call_endpoint(inbox, "on_network_error", ep.on_network_error, a, b)

    def call_endpoint(self, inbox: Inbox, what: Any, fn: Callable, *args: Any) -> None:
        """Run one endpoint callback; log (never propagate) what it raises."""
        error = self.run_held(inbox, what, fn, *args)
        if error is not None:
            self.log_failure(inbox, what, error)

    @staticmethod
    def log_failure(inbox: Inbox, what: Any, error: Exception) -> None:
        log.error("Endpoint %s (%s) failed in %s", inbox.name, type(inbox.endpoint).__name__,
                  what if isinstance(what, str) else what(), exc_info=error)

    def run_held(self, inbox: Inbox, what: Any, fn: Callable, *args: Any) -> Exception | None:
        """Run `fn(*args)` as a transaction: release its held effects if it returns, drop
        them if it raises (and return the exception). Warns when it blocked the loop.
        `what` is a str or a callable making one (only on the slow path)."""
        start = time.perf_counter()
        outer = self.held
        held: list[HeldEffect] = []
        self.held = held
        try:
            fn(*args)
        except Exception as e:
            self.held = outer
            self.drop(held, e)
            error: Exception | None = e
        else:
            self.held = outer
            if held:
                self.release(held)
            error = None
        elapsed = time.perf_counter() - start
        if elapsed > SLOW_CALLBACK_SECONDS:
            log.warning("Endpoint %s blocked the event loop of RpcEnv %s for %.1f s in %s; "
                        "endpoint callbacks must not block (use rpc_env.run_in_executor)",
                        inbox.name, self.env_name, elapsed,
                        what if isinstance(what, str) else what())
        return error

    # -- held effects -----------------------------------------------------------------------

    def release(self, held: list[HeldEffect]) -> None:
        """Let effects out in the order they were issued, as they would have gone out."""
        outer = self.held
        if outer is not None:          # inside an enclosing transaction: it decides
            outer.extend(held)
            return
        schedule = self.schedule
        for fn, args, _pending, context in held:
            if context is None:
                schedule(fn, args)
                continue
            try:
                fn(*args)
            except Exception:   # one reply that cannot be written must not stop the rest
                log.exception("RpcEnv %s: error sending a reply to %s", self.env_name,
                              context.sender_address)

    def drop(self, held: list[HeldEffect], cause: Exception) -> None:
        """Withdraw the effects of a callback that raised: its asks fail, its replies are
        un-issued (so the ask it handled can be failed instead), its sends are not sent."""
        sends = 0
        for _fn, _args, pending, context in held:
            if pending is not None:
                if not pending.future.done():
                    pending.future.set_exception(RpcError(
                        f"The ask was not sent: the callback that made it raised "
                        f"{type(cause).__name__}: {cause}"))
            elif context is not None:
                context.answered = False
            else:
                sends += 1
        if held:
            log.warning("Dropped %d message(s) and %d ask(s)/reply(s) issued by a callback "
                        "that raised %s", sends, len(held) - sends, type(cause).__name__)
