"""Hadoop's compression codecs for text files, picked by extension as Hadoop's
CompressionCodecFactory picks them: GzipCodec (.gz), DefaultCodec (.deflate) and BZip2Codec
(.bz2), the three that need no native library in Hadoop either.

Why DefaultCodec needs code of its own: its files hold a zlib stream (header, deflate data,
Adler-32), which neither gzip nor any stdlib file class reads or writes as a stream.
"""
from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import zlib
from typing import IO, Any, Iterator

EXTENSIONS = {"GzipCodec": ".gz", "DefaultCodec": ".deflate", "BZip2Codec": ".bz2"}
_READ = 1 << 16


def codec_extension(codec: str | None) -> str:
    """The file extension a codec class (Hadoop's name, with or without its package)
    writes; '' for none. Raises ValueError, as Spark, for a codec it does not have."""
    if codec is None:
        return ""
    ext = EXTENSIONS.get(codec.rsplit(".", 1)[-1])
    if ext is None:
        raise ValueError(f"Compression codec {codec} not found.")
    return ext


class ZlibReader(io.RawIOBase):
    """The bytes of a DefaultCodec file. Streams written one after another are read one
    after another, as Hadoop's DecompressorStream does; a truncated stream raises EOFError
    rather than pass for a whole one."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._z = zlib.decompressobj()
        self._begun = False         # some input was read

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while True:
            z = self._z
            if z.eof:                   # a stream ended: another may follow
                src = z.unused_data or self._raw.read(_READ)
                if not src:
                    return 0
                self._z = z = zlib.decompressobj()
            else:
                src = z.unconsumed_tail or self._raw.read(_READ)
                if not src:
                    if self._begun:
                        raise EOFError("Unexpected end of input stream (DefaultCodec)")
                    return 0            # an empty file
            self._begun = True
            data = z.decompress(src, len(b))
            if data:
                b[:len(data)] = data
                return len(data)


class ZlibWriter(io.RawIOBase):
    """A DefaultCodec file's writer: one zlib stream, ended on close."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._z = zlib.compressobj()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self._raw.write(self._z.compress(b))
        return len(b)

    def close(self) -> None:
        if not self.closed:
            self._raw.write(self._z.flush())
        super().close()


@contextlib.contextmanager
def decompressed(raw: IO[bytes], path: str) -> Iterator[IO[bytes]]:
    """`raw`'s bytes, decompressed when `path`'s extension names a codec."""
    if path.endswith(".gz"):
        with gzip.GzipFile(fileobj=raw, mode="rb") as f:
            yield f
    elif path.endswith(".bz2"):
        with bz2.BZ2File(raw, "rb") as f:
            yield f
    elif path.endswith(".deflate"):
        with io.BufferedReader(ZlibReader(raw), _READ) as f:
            yield f
    else:
        yield raw


@contextlib.contextmanager
def compressed(raw: IO[bytes], ext: str) -> Iterator[IO[bytes]]:
    """A stream that writes to `raw` compressed with the codec of extension `ext`."""
    if ext == ".gz":
        with gzip.GzipFile(fileobj=raw, mode="wb") as f:
            yield f
    elif ext == ".bz2":
        with bz2.BZ2File(raw, "wb") as f:
            yield f
    elif ext == ".deflate":
        with ZlibWriter(raw) as f:
            yield f
    else:
        yield raw
