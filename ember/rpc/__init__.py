"""Ember's RPC layer: RpcEnv, named endpoints, send/ask, auth handshake, msgpack codec.

See `ember.rpc.env` for the model, `ember.rpc.tcp` for the wire protocol, `ember.rpc.messages`
for the codec, `ember.rpc.transport` for the seam a transport implements.
Nothing here knows a deploy message.

Names are resolved lazily (PEP 562): importing a light submodule such as `ember.rpc.bind`
(the driver's UI binds its port with it) must not pay for asyncio and msgpack.
"""
import importlib
from typing import Any

_EXPORTS = {
    "ember.rpc.address": ("RpcAddress",),
    "ember.rpc.endpoint": ("ENDPOINT_VERIFIER", "CheckExistence", "PeerInfo", "RpcCallContext",
                           "RpcEndpoint", "RpcEndpointRef"),
    "ember.rpc.env": ("RpcEnv", "create_inprocess_env"),
    "ember.rpc.timers": ("Cancellable",),
    "ember.rpc.errors": ("RpcAuthenticationError", "RpcBindError", "RpcConnectionError",
                         "RpcEndpointNotFoundError", "RpcEnvStoppedError", "RpcError",
                         "RpcMessageTooLargeError", "RpcRemoteError", "RpcTimeoutError",
                         "UnsupportedMessageError"),
    "ember.rpc.messages": ("MessageDecodeError", "decode", "encode", "message"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ember.rpc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
