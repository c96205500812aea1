"""Byte formats for everything Ember ships between processes or writes to disk.

Closures go to task processes, partitions go through the shuffle, the block
store and back to the driver; all of it is bytes produced here.  The classes
mirror ``pyspark.serializers`` (same names, same stream framing: a 4-byte
big-endian signed length followed by the payload, with PySpark's negative
"special lengths" as markers) so engine code can be written the PySpark way.

Hot-path notes: framing is done with a precompiled ``struct``; batches are
built with ``itertools.islice``; reads tolerate short reads from raw sockets
and distinguish a clean end of stream (stop) from a stream cut mid-frame
(``TruncatedFrameError``), which PySpark silently treats as the end.

This module is pure: it imports nothing from the engine but ``ember.errors``.
"""

from __future__ import annotations

import io
import itertools
import marshal
import os
import pickle
import struct
import sys
import types
import zlib
from typing import IO, Any, Callable, Iterable, Iterator, List, Optional, Tuple

import cloudpickle

from ember.code_refs import reduce_nested
from ember.errors import PicklingError

__all__ = [
    "SpecialLengths",
    "TruncatedFrameError",
    "Serializer",
    "FramedSerializer",
    "CPickleSerializer",
    "PickleSerializer",
    "MarshalSerializer",
    "CloudPickleSerializer",
    "NoOpSerializer",
    "UTF8Deserializer",
    "CompressedSerializer",
    "BatchedSerializer",
    "AutoBatchedSerializer",
    "FlattenedValuesSerializer",
    "AutoSerializer",
    "PairDeserializer",
    "CartesianDeserializer",
    "ChunkedStream",
    "read_int",
    "write_int",
    "read_frames",
    "write_frame",
    "write_with_length",
    "dumps_closure",
    "dumps_node_by_node",
    "too_deep",
    "PICKLE_PROTOCOL",
]

PICKLE_PROTOCOL = 5

_INT = struct.Struct("!i")
_pack_int = _INT.pack
_unpack_int = _INT.unpack
_MAX_FRAME = (1 << 31) - 1
# Below this size header and payload are written with a single write() call
# (one syscall / one TCP segment on unbuffered sockets); above it, two writes
# avoid copying a large payload.
_COALESCE_LIMIT = 1 << 14


class SpecialLengths:
    """Negative frame lengths used as in-band markers (PySpark's values)."""

    END_OF_DATA_SECTION = -1
    PYTHON_EXCEPTION_THROWN = -2
    TIMING_DATA = -3
    END_OF_STREAM = -4
    NULL = -5
    START_ARROW_STREAM = -6


class TruncatedFrameError(OSError):
    """The stream ended in the middle of a frame header or payload.

    Deliberately *not* an EOFError: a clean end of stream between frames is
    normal and ends iteration, a cut inside a frame means lost data.
    """


# --------------------------------------------------------------------------- framing


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    """Read exactly n bytes; returns fewer only if the stream ends first."""
    data = stream.read(n)
    if data is None:
        data = b""
    if len(data) == n:
        return data
    # Short read (raw/unbuffered socket or pipe): keep reading.
    parts = [data]
    got = len(data)
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_int(stream: IO[bytes]) -> int:
    """Read one 4-byte big-endian signed int; EOFError at a clean end of stream."""
    data = _read_exact(stream, 4)
    if len(data) == 4:
        return _unpack_int(data)[0]
    if not data:
        raise EOFError
    raise TruncatedFrameError("stream ended inside a 4-byte length header")


def write_int(value: int, stream: IO[bytes]) -> None:
    """Write one 4-byte big-endian signed int (PySpark argument order)."""
    stream.write(_pack_int(value))


def write_frame(stream: IO[bytes], data: bytes) -> None:
    """Write ``data`` as one frame: 4-byte big-endian length, then the bytes."""
    n = len(data)
    if n > _MAX_FRAME:
        raise ValueError("frame of %d bytes exceeds the 2 GiB frame limit" % n)
    if n <= _COALESCE_LIMIT:
        stream.write(_pack_int(n) + data)
    else:
        stream.write(_pack_int(n))
        stream.write(data)


def write_with_length(obj: bytes, stream: IO[bytes]) -> None:
    """PySpark-named alias of :func:`write_frame` (note the argument order)."""
    write_frame(stream, obj)


def _read_frame(stream: IO[bytes]) -> Optional[bytes]:
    """One frame's payload; None for a NULL frame; EOFError at the end of data."""
    length = read_int(stream)
    if length < 0:
        if length == SpecialLengths.NULL:
            return None
        if length == SpecialLengths.END_OF_DATA_SECTION:
            raise EOFError
        raise ValueError("unexpected special length %d in a data stream" % length)
    data = _read_exact(stream, length)
    if len(data) != length:
        raise TruncatedFrameError(
            "stream ended inside a frame: expected %d bytes, got %d" % (length, len(data))
        )
    return data


def read_frames(stream: IO[bytes]) -> Iterator[Optional[bytes]]:
    """Yield each frame's payload until the end of the stream.

    Iteration stops at a clean end of stream or at an END_OF_DATA_SECTION (-1)
    marker; a NULL (-5) frame yields None; a stream cut inside a frame raises
    :class:`TruncatedFrameError`; other negative lengths raise ValueError.
    """
    while True:
        try:
            frame = _read_frame(stream)
        except EOFError:
            return
        yield frame


# --------------------------------------------------------------------------- serializers


class Serializer:
    """Turns objects into bytes and streams of objects into streams of bytes."""

    def dumps(self, obj: Any) -> bytes:
        raise NotImplementedError

    def loads(self, obj: bytes) -> Any:
        raise NotImplementedError

    def dump_stream(self, iterator: Iterable[Any], stream: IO[bytes]) -> None:
        """Serialize every object of ``iterator`` to ``stream``."""
        raise NotImplementedError

    def load_stream(self, stream: IO[bytes]) -> Iterator[Any]:
        """Yield the objects written by :meth:`dump_stream`."""
        raise NotImplementedError

    def _load_stream_without_unbatching(self, stream: IO[bytes]) -> Iterator[Any]:
        """Yield whole batches (lists); for unbatched serializers, one-item lists.

        Used where two streams must be consumed in lock-step batches (zip).
        """
        return ([obj] for obj in self.load_stream(stream))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, self.__class__) and self.__dict__ == other.__dict__

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        return "%s()" % self.__class__.__name__

    def __hash__(self) -> int:
        return hash(str(self))


class FramedSerializer(Serializer):
    """One object per frame, each frame made by :meth:`dumps`."""

    def dump_stream(self, iterator: Iterable[Any], stream: IO[bytes]) -> None:
        dumps = self.dumps
        for obj in iterator:
            write_frame(stream, dumps(obj))

    def load_stream(self, stream: IO[bytes]) -> Iterator[Any]:
        loads = self.loads
        for frame in read_frames(stream):
            yield None if frame is None else loads(frame)


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, allowed: frozenset, encoding: str) -> None:
        super().__init__(io.BytesIO(data), encoding=encoding)
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.allowed:
            raise pickle.UnpicklingError(
                f"global '{module}.{name}' is forbidden: it is not in allowed_names")
        return super().find_class(module, name)


class PickleSerializer(FramedSerializer):
    """Standard ``pickle`` (protocol 5). With `allowed_names` ((module, name) pairs), as
    PySpark's: loading refuses every class or function not named there (UnpicklingError),
    so data from elsewhere cannot run code while it is read."""

    allowed_names: Optional[frozenset] = None    # also for subclasses with their own init

    def __init__(self, allowed_names: Optional[Iterable[Tuple[str, str]]] = None) -> None:
        self.allowed_names = (None if allowed_names is None
                              else frozenset(tuple(n) for n in allowed_names))

    def dumps(self, obj: Any) -> bytes:
        return pickle.dumps(obj, PICKLE_PROTOCOL)

    def loads(self, obj: bytes, encoding: str = "bytes") -> Any:
        if self.allowed_names is None:
            return pickle.loads(obj, encoding=encoding)
        return _RestrictedUnpickler(obj, self.allowed_names, encoding).load()


class MarshalSerializer(FramedSerializer):
    """``marshal``: faster than pickle but only for core builtin types."""

    def dumps(self, obj: Any) -> bytes:
        return marshal.dumps(obj)

    def loads(self, obj: bytes) -> Any:
        return marshal.loads(obj)


class CloudPickleSerializer(PickleSerializer):
    """``cloudpickle``: pickles lambdas, closures and interactively defined classes.

    Serialization failures raise :class:`ember.errors.PicklingError` (see
    :func:`dumps_closure`).
    """

    def dumps(self, obj: Any) -> bytes:
        return dumps_closure(obj)


# As in PySpark: the default for data is cloudpickle, unless the namedtuple patch is asked for.
CPickleSerializer = (PickleSerializer if os.environ.get("PYSPARK_ENABLE_NAMEDTUPLE_PATCH") == "1"
                     else CloudPickleSerializer)


class AutoSerializer(FramedSerializer):
    """marshal while every object allows it, pickle from the first one that does not; each
    frame starts with b"M" or b"P" to say which."""

    def __init__(self) -> None:
        self._type: Optional[bytes] = None

    def dumps(self, obj: Any) -> bytes:
        if self._type is None:
            try:
                return b"M" + marshal.dumps(obj)
            except Exception:
                self._type = b"P"
        return b"P" + pickle.dumps(obj, PICKLE_PROTOCOL)

    def loads(self, obj: bytes) -> Any:
        kind = obj[:1]
        if kind == b"M":
            return marshal.loads(obj[1:])
        if kind == b"P":
            return pickle.loads(obj[1:])
        raise ValueError("invalid serialization type: %s" % kind)


class NoOpSerializer(FramedSerializer):
    """Frames raw bytes unchanged."""

    def dumps(self, obj: bytes) -> bytes:
        return obj

    def loads(self, obj: bytes) -> bytes:
        return obj


class UTF8Deserializer(Serializer):
    """Frames of UTF-8 text (e.g. lines of a text file) to ``str`` objects."""

    def __init__(self, use_unicode: bool = True) -> None:
        self.use_unicode = use_unicode

    def dumps(self, obj: str) -> bytes:
        return obj.encode("utf-8")

    def loads(self, obj: bytes) -> Any:
        return obj.decode("utf-8") if self.use_unicode else obj

    def dump_stream(self, iterator: Iterable[str], stream: IO[bytes]) -> None:
        for s in iterator:
            write_frame(stream, s.encode("utf-8"))

    def load_stream(self, stream: IO[bytes]) -> Iterator[Any]:
        loads = self.loads
        for frame in read_frames(stream):
            yield None if frame is None else loads(frame)

    def __repr__(self) -> str:
        return "UTF8Deserializer(%s)" % self.use_unicode


class CompressedSerializer(FramedSerializer):
    """Wraps another framed serializer and zlib-compresses each frame."""

    def __init__(self, serializer: FramedSerializer, level: int = 1) -> None:
        assert isinstance(serializer, FramedSerializer), "serializer must be a FramedSerializer"
        self.serializer = serializer
        self.level = level

    def dumps(self, obj: Any) -> bytes:
        return zlib.compress(self.serializer.dumps(obj), self.level)

    def loads(self, obj: bytes) -> Any:
        return self.serializer.loads(zlib.decompress(obj))

    def __repr__(self) -> str:
        return "CompressedSerializer(%s)" % self.serializer


class BatchedSerializer(Serializer):
    """Writes lists of up to ``batchSize`` objects, one list per frame of the
    wrapped serializer; reading flattens the batches back into objects.

    ``batchSize=-1`` (``UNLIMITED_BATCH_SIZE``, PySpark's default) writes the
    whole iterator as a single batch (one frame, even when empty).
    ``dumps``/``loads`` delegate to the wrapped serializer for single objects.
    """

    UNLIMITED_BATCH_SIZE = -1
    UNKNOWN_BATCH_SIZE = 0

    def __init__(self, serializer: Serializer, batchSize: int = UNLIMITED_BATCH_SIZE) -> None:  # noqa: N803
        self.serializer = serializer
        self.batchSize = batchSize

    def _batched(self, iterator: Iterable[Any]) -> Iterator[List[Any]]:
        if self.batchSize == self.UNLIMITED_BATCH_SIZE:
            yield list(iterator)
            return
        size = self.batchSize
        if isinstance(iterator, (list, tuple)):
            for start in range(0, len(iterator), size):
                yield list(iterator[start:start + size])
            return
        it = iter(iterator)
        islice = itertools.islice
        while True:
            batch = list(islice(it, size))
            if not batch:
                return
            yield batch

    def dump_stream(self, iterator: Iterable[Any], stream: IO[bytes]) -> None:
        self.serializer.dump_stream(self._batched(iterator), stream)

    def load_stream(self, stream: IO[bytes]) -> Iterator[Any]:
        return itertools.chain.from_iterable(self._load_stream_without_unbatching(stream))

    def _load_stream_without_unbatching(self, stream: IO[bytes]) -> Iterator[Any]:
        for batch in self.serializer.load_stream(stream):
            # A producer may have written a bare object instead of a list.
            yield batch if isinstance(batch, list) else [batch]

    load_batches = _load_stream_without_unbatching

    def dumps(self, obj: Any) -> bytes:
        return self.serializer.dumps(obj)

    def loads(self, obj: bytes) -> Any:
        return self.serializer.loads(obj)

    def __repr__(self) -> str:
        return "BatchedSerializer(%s, %d)" % (str(self.serializer), self.batchSize)


class FlattenedValuesSerializer(BatchedSerializer):
    """PySpark's: a stream of (key, values) pairs written with long value lists cut into
    pairs of at most `batchSize` values, so that frames stay of similar sizes; reading
    gives the cut pairs back as they were written."""

    def __init__(self, serializer: Serializer, batchSize: int = 10) -> None:  # noqa: N803
        super().__init__(serializer, batchSize)

    def _batched(self, iterator: Iterable[Any]) -> Iterator[Any]:
        n = self.batchSize
        for key, values in iterator:
            for start in range(0, len(values), n):
                yield key, values[start:start + n]

    def load_stream(self, stream: IO[bytes]) -> Iterator[Any]:
        return self.serializer.load_stream(stream)

    def __repr__(self) -> str:
        return "FlattenedValuesSerializer(%s, %d)" % (self.serializer, self.batchSize)


class AutoBatchedSerializer(BatchedSerializer):
    """Batches adaptively so frames stay around ``bestSize`` bytes.

    Like PySpark: start with one object per batch, double the batch while a
    frame is smaller than ``bestSize`` (64 KiB), halve it when a frame exceeds
    ten times that.  Requires a framed serializer (``dumps`` of a list).
    """

    def __init__(self, serializer: Serializer, bestSize: int = 1 << 16) -> None:  # noqa: N803
        BatchedSerializer.__init__(self, serializer, self.UNKNOWN_BATCH_SIZE)
        self.bestSize = bestSize

    def dump_stream(self, iterator: Iterable[Any], stream: IO[bytes]) -> None:
        batch, best = 1, self.bestSize
        dumps = self.serializer.dumps
        it = iter(iterator)
        islice = itertools.islice
        while True:
            vs = list(islice(it, batch))
            if not vs:
                break
            data = dumps(vs)
            write_frame(stream, data)
            size = len(data)
            if size < best:
                batch *= 2
            elif size > best * 10 and batch > 1:
                batch //= 2

    def __repr__(self) -> str:
        return "AutoBatchedSerializer(%s)" % self.serializer


class CartesianDeserializer(Serializer):
    """Reads a cartesian product stream: batches of the key serializer alternating with
    batches of the value serializer; each pair of batches yields their product."""

    def __init__(self, key_ser: Serializer, val_ser: Serializer) -> None:
        self.key_ser = key_ser
        self.val_ser = val_ser

    def _load_stream_without_unbatching(self, stream: IO[bytes]) -> Iterator[Any]:
        keys = self.key_ser._load_stream_without_unbatching(stream)
        vals = self.val_ser._load_stream_without_unbatching(stream)
        for key_batch, val_batch in zip(keys, vals):
            # one batch per pair, so that a cartesian of cartesians stays correct
            yield itertools.product(key_batch, val_batch)

    def load_stream(self, stream: IO[bytes]) -> Iterator[Any]:
        return itertools.chain.from_iterable(self._load_stream_without_unbatching(stream))

    def __repr__(self) -> str:
        return "CartesianDeserializer(%s, %s)" % (str(self.key_ser), str(self.val_ser))


class PairDeserializer(Serializer):
    """Reads a zip stream: batches of the key serializer alternating with batches of the
    value serializer, zipped batch by batch (they must have the same length)."""

    def __init__(self, key_ser: Serializer, val_ser: Serializer) -> None:
        self.key_ser = key_ser
        self.val_ser = val_ser

    def _load_stream_without_unbatching(self, stream: IO[bytes]) -> Iterator[Any]:
        keys = self.key_ser._load_stream_without_unbatching(stream)
        vals = self.val_ser._load_stream_without_unbatching(stream)
        for key_batch, val_batch in zip(keys, vals):
            # batches of a nested zip/cartesian are iterators
            key_batch = key_batch if hasattr(key_batch, "__len__") else list(key_batch)
            val_batch = val_batch if hasattr(val_batch, "__len__") else list(val_batch)
            if len(key_batch) != len(val_batch):
                raise ValueError("Can not deserialize PairRDD with different number of items"
                                 " in batches: (%d, %d)" % (len(key_batch), len(val_batch)))
            yield zip(key_batch, val_batch)

    def load_stream(self, stream: IO[bytes]) -> Iterator[Any]:
        return itertools.chain.from_iterable(self._load_stream_without_unbatching(stream))

    def __repr__(self) -> str:
        return "PairDeserializer(%s, %s)" % (str(self.key_ser), str(self.val_ser))


class ChunkedStream:
    """PySpark's write side of a stream of unknown length: the bytes written go out in
    frames of `buffer_size` (a length, then the bytes) as each fills, and close() sends the
    rest as a last, shorter frame, then the length -1, and closes `wrapped`. The reader can
    start before the writer ends and knows where the stream stops."""

    def __init__(self, wrapped: IO[bytes], buffer_size: int) -> None:
        self.wrapped = wrapped
        self.buffer_size = buffer_size
        self.buffer = bytearray()

    def write(self, data: bytes) -> None:
        self.buffer += data
        size = self.buffer_size
        full = len(self.buffer) - len(self.buffer) % size
        for start in range(0, full, size):
            write_frame(self.wrapped, self.buffer[start:start + size])
        del self.buffer[:full]

    def close(self) -> None:
        if self.buffer:
            write_frame(self.wrapped, self.buffer)
            self.buffer = bytearray()
        write_int(-1, self.wrapped)
        self.wrapped.close()

    @property
    def closed(self) -> bool:
        return self.wrapped.closed


# --------------------------------------------------------------------------- closures


_code_reduce = cloudpickle.Pickler.dispatch_table[types.CodeType] \
    if hasattr(cloudpickle.Pickler, "dispatch_table") and \
    types.CodeType in getattr(cloudpickle.Pickler, "dispatch_table", {}) else None


def _reduce_code_keeping_filename(code: types.CodeType) -> Any:
    """cloudpickle's code reducer, but keeping co_filename so remote tracebacks name the
    user's file instead of "<dynamic-code>"."""
    rv = _code_reduce(code)
    args = tuple(code.co_filename if a == "<dynamic-code>" else a for a in rv[1])
    return (rv[0], args) + tuple(rv[2:])


# id -> (class or function, its module's namespace, its name there) of the module-level
# classes and functions already found to pickle by reference: cloudpickle checks each one
# again on every dump (module lookup, qualname walk, registry scan: a quarter of a warm
# job's stage pickling). A hit is still checked to be that module's attribute now, so a
# rebound name pickles by value as cloudpickle would.
_by_reference: dict[int, tuple[Any, dict, str]] = {}
_BY_REFERENCE_MAX = 4096
# cloudpickle's registry of modules pickled by value; the cache is used only while it is
# empty (a cloudpickle without it counts as never empty: no caching)
_pickle_by_value_modules = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES",
                                   {"(unknown)"})


class _FilenamePreservingPickler(cloudpickle.Pickler):
    if _code_reduce is not None:
        dispatch_table = dict(cloudpickle.Pickler.dispatch_table)
        dispatch_table[types.CodeType] = _reduce_code_keeping_filename

    def reducer_override(self, obj: Any) -> Any:
        t = type(obj)
        if t is not types.FunctionType and not issubclass(t, type):
            # an instance: cloudpickle (3.x) overrides only classes and functions here
            return NotImplemented
        known = _by_reference.get(id(obj))
        if known is not None and known[0] is obj and known[1].get(known[2]) is obj \
                and not _pickle_by_value_modules:
            return NotImplemented          # pickle's save_global, as cloudpickle decides
        if t is types.FunctionType and not _pickle_by_value_modules and \
                "<" in obj.__qualname__:
            nested = reduce_nested(obj)    # one of Ember's own nested functions
            if nested is not None:
                return nested
        reduced = super().reducer_override(obj)
        if reduced is NotImplemented and not _pickle_by_value_modules:
            _remember_by_reference(obj)
        return reduced


def _remember_by_reference(obj: Any) -> None:
    """Cache a class or function cloudpickle just chose to pickle by reference, when it is
    a plain attribute of its module (a nested qualname is looked up the slow way)."""
    name = getattr(obj, "__qualname__", None)
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if not name or "." in name or module is None:
        return
    namespace = getattr(module, "__dict__", None)
    if namespace is None or namespace.get(name) is not obj:
        return
    if len(_by_reference) >= _BY_REFERENCE_MAX:
        _by_reference.clear()
    _by_reference[id(obj)] = (obj, namespace, name)


def dumps_closure(obj: Any, is_node: Optional[Callable[[Any], bool]] = None) -> bytes:
    """``cloudpickle.dumps(obj)`` for shipping functions (and what they capture); with
    ``is_node``, a pickle that fails for its depth is made again by dumps_node_by_node.

    On failure raises :class:`ember.errors.PicklingError` with PySpark's
    message, ``"Could not serialize object: <ExcType>: <message>"``, followed,
    when it can be found, by the path to the culprit, e.g.
    ``"(failed while pickling closure variable 'lock' of function <lambda>)"``.
    The culprit search only runs on the failure path.  The original exception
    is chained as ``__cause__``; the path is also on the error as ``failed_path``.
    """
    try:
        buf = io.BytesIO()
        _FilenamePreservingPickler(buf, protocol=PICKLE_PROTOCOL).dump(obj)
        return buf.getvalue()
    except Exception as e:  # noqa: BLE001 - everything becomes a PicklingError
        err = e
    if is_node is not None and too_deep(err):
        return dumps_node_by_node(obj, is_node)
    emsg = str(err)
    if "'i' format requires" in emsg or (
        isinstance(err, OverflowError) and "larger than" in emsg
    ):
        msg = "Object too large to serialize: %s" % emsg
    else:
        msg = "Could not serialize object: %s: %s" % (type(err).__name__, emsg)
    path: List[str] = []
    try:
        path = _find_unpicklable(obj)
    except Exception:  # noqa: BLE001 - diagnostics must never mask the real error
        path = []
    if path:
        msg += " (failed while pickling %s)" % ", reached via ".join(path)
    exc = PicklingError(msg)
    # Outermost step first, e.g. ["closure variable 'obj' of function f", "attribute 'lock' ..."].
    exc.failed_path = list(reversed(path))  # type: ignore[attr-defined]
    raise exc from err


def too_deep(error: Optional[BaseException]) -> bool:
    """Whether a pickling error came from Python's recursion limit."""
    while error is not None:
        if isinstance(error, RecursionError):
            return True
        error = error.__cause__
    return False


def dumps_node_by_node(obj: Any, is_node: Callable[[Any], bool]) -> bytes:
    """``obj`` cloudpickled with no recursion through the nodes it reaches (the RDDs of a
    lineage thousands deep, which fail dumps_closure as "excessively deep recursion"):
    each node is pickled on its own, its references to other nodes as persistent ids,
    after every node it refers to. One pickler writes them all, so what two nodes share
    stays one object. The result is an ordinary pickle: ``pickle.loads`` rebuilds ``obj``.
    Failures raise PicklingError in dumps_closure's words (a node that reaches itself
    through another node, a cycle, among them)."""
    try:
        return _dumps_node_by_node(obj, is_node)
    except Exception as err:  # noqa: BLE001 - everything becomes a PicklingError
        raise PicklingError("Could not serialize object: %s: %s"
                            % (type(err).__name__, err)) from err


def _dumps_node_by_node(obj: Any, is_node: Callable[[Any], bool]) -> bytes:
    nodes: List[Any] = [obj]                    # obj first, then nodes as found
    index = {id(obj): 0}
    refs: List[List[int]] = []                  # refs[i]: the nodes nodes[i] refers to

    def number(node: Any) -> int:
        i = index.get(id(node))
        if i is None:
            i = index[id(node)] = len(nodes)
            nodes.append(node)
        return i

    scratch = io.BytesIO()                     # the first pass only finds the references
    finder = _NodePickler(scratch, is_node, number)
    while len(refs) < len(nodes):
        finder.current, finder.found = nodes[len(refs)], []
        finder.dump(finder.current)
        finder.clear_memo()
        scratch.seek(0)
        scratch.truncate()
        refs.append(finder.found)
    order = _after_references(refs)            # obj, which nothing refers to, goes last
    position = {id(nodes[i]): p for p, i in enumerate(order)}
    buf = io.BytesIO()
    writer = _NodePickler(buf, is_node, lambda node: position[id(node)])
    for i in order:
        writer.current = nodes[i]
        writer.dump(writer.current)
    return pickle.dumps(_NodeByNode(buf.getvalue(), len(order) - 1), PICKLE_PROTOCOL)


class _NodePickler(_FilenamePreservingPickler):
    """Pickles `current`, every other node as a persistent id from `number`."""

    def __init__(self, file: IO[bytes], is_node: Callable[[Any], bool],
                 number: Callable[[Any], int]) -> None:
        super().__init__(file, protocol=PICKLE_PROTOCOL)
        self.is_node, self.number = is_node, number
        self.current: Any = None
        self.found: List[int] = []

    def persistent_id(self, obj: Any) -> Optional[int]:
        if obj is self.current or not self.is_node(obj):
            return None
        n = self.number(obj)
        self.found.append(n)
        return n


def _after_references(refs: List[List[int]]) -> List[int]:
    """0..len(refs)-1, each after all it refers to (an iterative depth-first post-order
    from 0, which reaches every node)."""
    done: List[int] = []
    state = [0] * len(refs)                  # 0 unseen, 1 on the path, 2 placed
    stack = [(0, iter(refs[0]))]
    state[0] = 1
    while stack:
        i, pending = stack[-1]
        for j in pending:
            if state[j] == 1:
                raise ValueError("an object refers back to itself through another node")
            if state[j] == 0:
                state[j] = 1
                stack.append((j, iter(refs[j])))
                break
        else:
            stack.pop()
            state[i] = 2
            done.append(i)
    return done


class _NodeByNode:
    __slots__ = ("payload", "count")

    def __init__(self, payload: bytes, count: int) -> None:
        self.payload, self.count = payload, count

    def __reduce__(self) -> tuple:
        return _load_node_by_node, (self.payload, self.count)


class _NodeUnpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file)
        self.loaded: List[Any] = []

    def persistent_load(self, pid: Any) -> Any:
        return self.loaded[pid]


def _load_node_by_node(payload: bytes, count: int) -> Any:
    reader = _NodeUnpickler(io.BytesIO(payload))
    for _ in range(count):
        reader.loaded.append(reader.load())
    return reader.load()


_MAX_PROBES = 300
_MAX_DEPTH = 8
_MAX_ITEMS = 200


def _describe(obj: Any) -> str:
    if isinstance(obj, types.FunctionType):
        return "function %s" % obj.__name__
    if isinstance(obj, types.MethodType):
        return "method %s" % getattr(obj.__func__, "__name__", "?")
    if isinstance(obj, type):
        return "class %s" % obj.__name__
    return "%s object" % type(obj).__name__


def _children(obj: Any) -> Iterator[Tuple[str, Any]]:
    """(label, value) pairs for the things pickling ``obj`` would also pickle."""
    what = _describe(obj)
    if isinstance(obj, types.FunctionType):
        code = obj.__code__
        if obj.__closure__:
            for name, cell in zip(code.co_freevars, obj.__closure__):
                try:
                    value = cell.cell_contents
                except ValueError:  # empty cell
                    continue
                yield "closure variable %r of %s" % (name, what), value
        g = obj.__globals__
        for name in _code_global_names(code):
            if name in g:
                yield "global %r of %s" % (name, what), g[name]
        if obj.__defaults__:
            argnames = code.co_varnames[: code.co_argcount]
            offset = len(argnames) - len(obj.__defaults__)
            for i, value in enumerate(obj.__defaults__):
                name = argnames[offset + i] if 0 <= offset + i < len(argnames) else str(i)
                yield "default of argument %r of %s" % (name, what), value
        if obj.__kwdefaults__:
            for name, value in obj.__kwdefaults__.items():
                yield "default of argument %r of %s" % (name, what), value
        return
    if isinstance(obj, types.MethodType):
        yield "instance bound to %s" % what, obj.__self__
        yield "function of %s" % what, obj.__func__
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for i, value in enumerate(itertools.islice(obj, _MAX_ITEMS)):
            yield "item %d of %s" % (i, what), value
        return
    if isinstance(obj, dict):
        for key, value in itertools.islice(obj.items(), _MAX_ITEMS):
            yield "value for key %r of %s" % (key, what), value
        return
    func = getattr(obj, "func", None)
    if func is not None and hasattr(obj, "args") and hasattr(obj, "keywords"):
        # functools.partial and look-alikes
        yield "function of %s" % what, func
        for i, value in enumerate(obj.args):
            yield "argument %d of %s" % (i, what), value
        for key, value in (obj.keywords or {}).items():
            yield "keyword argument %r of %s" % (key, what), value
        return
    state = getattr(obj, "__dict__", None)
    getstate = getattr(type(obj), "__getstate__", None)
    if isinstance(state, dict) and getstate is not None and \
            getstate is not getattr(object, "__getstate__", None):
        try:
            state = obj.__getstate__()      # what pickling really sees (e.g. an RDD)
        except Exception:  # noqa: BLE001 - fall back to the raw attributes
            pass
    if isinstance(state, dict):
        for name, value in itertools.islice(state.items(), _MAX_ITEMS):
            yield "attribute %r of %s" % (name, what), value
    for klass in type(obj).__mro__:             # __slots__ attributes (e.g. map's function)
        names = klass.__dict__.get("__slots__", ())
        for name in (names,) if isinstance(names, str) else names:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                yield "attribute %r of %s" % (name, what), getattr(obj, name)


def _code_global_names(code: types.CodeType) -> Iterator[str]:
    seen = set()
    stack = [code]
    while stack:
        c = stack.pop()
        for name in c.co_names:
            if name not in seen:
                seen.add(name)
                yield name
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                stack.append(const)


def _find_unpicklable(root: Any) -> List[str]:
    """Labels from the innermost culprit outwards (empty when nothing narrower fails)."""
    budget = [_MAX_PROBES]
    seen = {id(root)}

    def fails(value: Any) -> bool:
        budget[0] -= 1
        try:
            cloudpickle.dumps(value, PICKLE_PROTOCOL)
        except Exception:  # noqa: BLE001
            return True
        return False

    def search(obj: Any, depth: int) -> Optional[List[str]]:
        if depth >= _MAX_DEPTH:
            return None
        for label, value in _children(obj):
            if budget[0] <= 0:
                return None
            if id(value) in seen:
                continue
            seen.add(id(value))
            if fails(value):
                deeper = search(value, depth + 1)
                return (deeper or []) + [label]
        return None

    return search(root, 0) or []
