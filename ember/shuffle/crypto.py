"""spark.io.encryption.enabled: shuffle and spill files written as AES-GCM sealed chunks.

Every pickled batch the writer would write becomes ``length (u32) | nonce (12) | ciphertext
and tag``; partitions stay contiguous runs of chunks, so the index, the spill merge (which
copies sealed bytes as they are) and remote fetches (which ship them sealed) do not change.
The key is per application: the driver draws it and hands it to its executors with the
application's configuration (spark.ember.io.encryption.secret, redacted as a secret).
"""
from __future__ import annotations

import io
import os
import pickle
import struct
from typing import Any, BinaryIO, Callable, Iterator

from ember import config

IO_ENCRYPTION = "spark.io.encryption.enabled"
IO_KEY = "spark.ember.io.encryption.secret"
_LEN = struct.Struct(">I")
_NONCE = 12


def new_key_hex() -> str:
    return os.urandom(32).hex()


def key_from_conf(conf: Any) -> bytes | None:
    """The application's I/O key when spark.io.encryption.enabled, else None."""
    if not config.read(conf, IO_ENCRYPTION):
        return None
    key = conf.get(IO_KEY)
    if not key:
        raise ValueError(f"{IO_ENCRYPTION}=true but the application's key ({IO_KEY}) is "
                         "missing; it is set by the driver")
    return bytes.fromhex(key)


class Sealer:
    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        self._aead = AESGCM(key)

    def seal(self, data: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        ct = self._aead.encrypt(nonce, data, None)
        return _LEN.pack(_NONCE + len(ct)) + nonce + ct

    def batches(self, f: BinaryIO, end: int,
                loads: Callable[[bytes], list] = pickle.loads) -> Iterator[list]:
        """The batches of the sealed chunks from f's position up to `end`; `loads` turns one
        chunk's plaintext into its batch (pickle, or the application's serializer)."""
        from cryptography.exceptions import InvalidTag
        while f.tell() < end:
            head = f.read(4)
            if len(head) < 4:
                raise ValueError("truncated encrypted shuffle chunk")
            (n,) = _LEN.unpack(head)
            blob = f.read(n)
            if len(blob) < n or n <= _NONCE:
                raise ValueError("truncated encrypted shuffle chunk")
            try:
                plain = self._aead.decrypt(blob[:_NONCE], blob[_NONCE:], None)
            except InvalidTag:
                raise ValueError("encrypted shuffle chunk does not decrypt (tampered, or "
                                 "another application's key)") from None
            yield loads(plain)

    def batches_from_bytes(self, data: bytes,
                           loads: Callable[[bytes], list] = pickle.loads) -> Iterator[list]:
        return self.batches(io.BytesIO(data), len(data), loads)
