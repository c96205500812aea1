"""Ember's RPC layer: RpcEnv, named endpoints, send/ask, auth handshake, msgpack codec.

See `ember.rpc.core` for the model and the wire protocol, `ember.rpc.messages` for the codec.
Nothing here knows a deploy message.
"""
from ember.rpc.address import RpcAddress
from ember.rpc.core import (ENDPOINT_VERIFIER, Cancellable, CheckExistence, RpcCallContext,
                            RpcEndpoint, RpcEndpointRef, RpcEnv, create_inprocess_env)
from ember.rpc.errors import (RpcAuthenticationError, RpcBindError, RpcConnectionError,
                              RpcEndpointNotFoundError, RpcEnvStoppedError, RpcError,
                              RpcMessageTooLargeError, RpcRemoteError, RpcTimeoutError)
from ember.rpc.messages import MessageDecodeError, decode, encode, message

__all__ = [
    "RpcAddress", "RpcEndpoint", "RpcCallContext", "RpcEndpointRef", "RpcEnv", "Cancellable",
    "CheckExistence", "ENDPOINT_VERIFIER", "create_inprocess_env",
    "RpcError", "RpcTimeoutError", "RpcConnectionError", "RpcAuthenticationError",
    "RpcEndpointNotFoundError", "RpcRemoteError", "RpcMessageTooLargeError",
    "RpcEnvStoppedError", "RpcBindError",
    "MessageDecodeError", "message", "encode", "decode",
]
