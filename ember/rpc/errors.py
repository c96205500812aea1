"""Exceptions of the RPC layer.

They derive from `ember.errors.SparkException` (so the CLI reports them as engine failures
without a traceback) and, where one fits, from the builtin a caller would naturally catch:
an ask timeout is also a `TimeoutError`, a lost connection also a `ConnectionError`.
"""
from __future__ import annotations

from ember.errors import SparkException


class RpcError(SparkException):
    """Base of every RPC failure."""


class RpcTimeoutError(RpcError, TimeoutError):
    """An ask got no reply within its timeout (spark.rpc.askTimeout by default)."""


class RpcConnectionError(RpcError, ConnectionError):
    """The connection to the remote RpcEnv could not be made, or closed before a reply."""


class RpcAuthenticationError(RpcConnectionError):
    """The challenge-response handshake failed (wrong secret, or auth on one side only)."""


class RpcEndpointNotFoundError(RpcError):
    """No endpoint with that name at that address (Spark's RpcEndpointNotFoundException)."""


class RpcMessageTooLargeError(RpcError, ValueError):
    """An encoded message exceeds spark.rpc.message.maxSize."""


class RpcEnvStoppedError(RpcConnectionError):
    """The RpcEnv was shut down; nothing more can be sent through it."""


class RpcRemoteError(RpcError):
    """The remote endpoint failed the ask (``context.send_failure`` or an exception in
    ``receive_and_reply``). Only the exception's type name and message cross the wire
    (never the exception object: that would need pickle)."""

    def __init__(self, remote_type: str, remote_message: str) -> None:
        super().__init__(f"{remote_type}: {remote_message}")
        self.remote_type = remote_type
        self.remote_message = remote_message

    def __reduce__(self):  # keep it picklable with its two-argument constructor
        return (type(self), (self.remote_type, self.remote_message))


class RpcBindError(RpcError, OSError):
    """The RpcEnv could not listen on its port (nor on the successive ones it tried)."""


class UnsupportedMessageError(RpcError, ValueError):
    """An endpoint received a message type it does not handle (Spark's Inbox answers
    "Unsupported message ..."). The one error every endpoint raises or replies for it."""

    def __init__(self, msg: object, sender: object = None) -> None:
        where = f" from {sender}" if sender is not None else ""
        super().__init__(f"Unsupported message {type(msg).__name__}{where}")
