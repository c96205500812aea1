"""Hadoop's SequenceFile and text formats, read and written without a JVM.

PySpark's sequenceFile / hadoopFile / newAPIHadoopFile / hadoopRDD / newAPIHadoopRDD and the
saveAs*Hadoop* / saveAsSequenceFile family move data through Hadoop's InputFormats and
OutputFormats; files written there are read by Hadoop, Hive and Spark, and theirs here.
So this module writes the bytes Hadoop writes (SequenceFile version 6: uncompressed,
record- or block-compressed with DefaultCodec or GzipCodec; the common Writables) and
converts values as Spark's PythonHadoopUtil does: IntWritable <-> int, Text <-> str,
MapWritable <-> dict, BytesWritable -> bytearray, NullWritable <-> None, ...

A file is read split by split (FileSplit byte ranges, as textFile's): a split owns the
records that follow each sync marker starting inside it, the first split also those right
after the header, which is how Hadoop's reader divides a file without reading it twice.
PySpark's pickle files are SequenceFiles too (NullWritable keys, BytesWritable values of
Java-serialized byte[][] holding pickled batches): saveAsPickleFile writes them here.
"""
from __future__ import annotations

import decimal
import io
import math
import os
import pickle
import struct
import zlib
from itertools import islice
from typing import Any, Callable, Iterator

from ember.errors import SparkException

SYNC_ESCAPE = -1
SYNC_HASH_SIZE = 16
SYNC_SIZE = 4 + SYNC_HASH_SIZE
# uncompressed and record-compressed files: a sync marker after this many bytes (Hadoop 3)
SYNC_INTERVAL = 5 * 1024 * SYNC_SIZE
# block-compressed files: a block ends once its keys and values pass this many bytes
BLOCK_SIZE = 1_000_000
VERSION = 6

_IO = "org.apache.hadoop.io."
TEXT, INT, LONG, FLOAT, DOUBLE = (_IO + n for n in (
    "Text", "IntWritable", "LongWritable", "FloatWritable", "DoubleWritable"))
BOOLEAN, BYTES, NULL, MAP, BYTE = (_IO + n for n in (
    "BooleanWritable", "BytesWritable", "NullWritable", "MapWritable", "ByteWritable"))
VINT, VLONG = _IO + "VIntWritable", _IO + "VLongWritable"

SEQUENCE_INPUT = frozenset({"org.apache.hadoop.mapred.SequenceFileInputFormat",
                            "org.apache.hadoop.mapreduce.lib.input.SequenceFileInputFormat"})
TEXT_INPUT = frozenset({"org.apache.hadoop.mapred.TextInputFormat",
                        "org.apache.hadoop.mapreduce.lib.input.TextInputFormat"})
KEY_VALUE_INPUT = frozenset({"org.apache.hadoop.mapred.KeyValueTextInputFormat",
                             "org.apache.hadoop.mapreduce.lib.input.KeyValueTextInputFormat"})
SEQUENCE_OUTPUT = frozenset({"org.apache.hadoop.mapred.SequenceFileOutputFormat",
                             "org.apache.hadoop.mapreduce.lib.output.SequenceFileOutputFormat"})
TEXT_OUTPUT = frozenset({"org.apache.hadoop.mapred.TextOutputFormat",
                         "org.apache.hadoop.mapreduce.lib.output.TextOutputFormat"})

def _gzip(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


_CODEC = "org.apache.hadoop.io.compress."
DEFAULT_CODEC = _CODEC + "DefaultCodec"
# codec -> (compress, decompress) of one buffer, as Hadoop's codec streams frame it
_CODECS: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    DEFAULT_CODEC: (zlib.compress, zlib.decompress),
    _CODEC + "GzipCodec": (_gzip, lambda b: zlib.decompress(b, 47)),
}


def codec(name: str) -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]:
    try:
        return _CODECS[name]
    except KeyError:
        raise SparkException(f"Compression codec {name} not found: Ember writes and reads "
                             f"sequence files with {' or '.join(sorted(_CODECS))}") from None


# -- Hadoop's variable-length integers (WritableUtils.writeVLong / readVLong) -------------

def write_vlong(out: bytearray, value: int) -> None:
    if -112 <= value <= 127:
        out.append(value & 0xFF)
        return
    size = -112
    if value < 0:
        value ^= -1
        size = -120
    n = (value.bit_length() + 7) // 8
    out.append((size - n) & 0xFF)
    out += value.to_bytes(n, "big")


def _signed(byte: int) -> int:
    return byte - 256 if byte > 127 else byte


def _vlong_size(first: int) -> int:
    """The bytes of a vint, its first (signed) byte included."""
    return 1 if first >= -112 else ((-119 - first) if first < -120 else (-111 - first))


def read_vlong(buf: Any, pos: int) -> tuple[int, int]:
    """(value, position after it) of the vint at buf[pos]."""
    first = _signed(buf[pos])
    if first >= -112:
        return first, pos + 1
    n = _vlong_size(first)
    value = int.from_bytes(buf[pos + 1:pos + n], "big")
    return (value ^ -1 if first < -120 else value), pos + n


# -- Writables: bytes <-> Python values ---------------------------------------------------

_INT, _LONG = struct.Struct(">i"), struct.Struct(">q")
_FLOAT, _DOUBLE = struct.Struct(">f"), struct.Struct(">d")
# AbstractMapWritable's ids for the classes it knows without naming them
_MAP_IDS = {BOOLEAN: -126, BYTES: -125, FLOAT: -124, INT: -123, LONG: -122, MAP: -121,
            NULL: -119, TEXT: -116, VINT: -114, VLONG: -113}
_MAP_CLASSES = {v: k for k, v in _MAP_IDS.items()}


def _encode_text(out: bytearray, value: str) -> None:
    data = value.encode("utf-8", "replace")
    write_vlong(out, len(data))
    out += data


def _encode_map(out: bytearray, value: dict) -> None:
    entries = [(writable_class(k), k, writable_class(v), v) for k, v in value.items()]
    new: dict[str, int] = {}
    for kc, _, vc, _ in entries:
        for cls in (kc, vc):
            if cls not in _MAP_IDS and cls not in new:
                new[cls] = len(new) + 1
    out.append(len(new))
    for cls, cid in new.items():
        name = cls.encode()
        out.append(cid)
        out += len(name).to_bytes(2, "big") + name
    out += _INT.pack(len(entries))
    for kc, k, vc, v in entries:
        out.append(_MAP_IDS.get(kc, new.get(kc, 0)) & 0xFF)
        ENCODERS[kc](out, k)
        out.append(_MAP_IDS.get(vc, new.get(vc, 0)) & 0xFF)
        ENCODERS[vc](out, v)


ENCODERS: dict[str, Callable[[bytearray, Any], None]] = {
    TEXT: _encode_text,
    INT: lambda out, v: out.extend(_INT.pack(v)),
    LONG: lambda out, v: out.extend(_LONG.pack(v)),
    FLOAT: lambda out, v: out.extend(_FLOAT.pack(v)),
    DOUBLE: lambda out, v: out.extend(_DOUBLE.pack(v)),
    BOOLEAN: lambda out, v: out.append(1 if v else 0),
    BYTE: lambda out, v: out.extend(struct.pack(">b", v)),
    BYTES: lambda out, v: out.extend(_INT.pack(len(v)) + bytes(v)),
    NULL: lambda out, v: None,
    VINT: write_vlong,
    VLONG: write_vlong,
    MAP: _encode_map,
}


def _decode_map(buf: Any, pos: int) -> tuple[dict, int]:
    classes = dict(_MAP_CLASSES)
    for _ in range(buf[pos]):
        cid = _signed(buf[pos + 1])
        n = int.from_bytes(buf[pos + 2:pos + 4], "big")
        classes[cid] = bytes(buf[pos + 4:pos + 4 + n]).decode()
        pos += 3 + n
    (size,) = _INT.unpack_from(buf, pos + 1)
    pos += 5
    result = {}
    for _ in range(size):
        key, pos = _decode_entry(buf, pos, classes)
        result[key], pos = _decode_entry(buf, pos, classes)
    return result, pos


def _decode_entry(buf: Any, pos: int, classes: dict[int, str]) -> tuple[Any, int]:
    cid = _signed(buf[pos])
    if cid not in classes:
        raise ValueError(f"a MapWritable names class id {cid} it did not declare")
    return decoder(classes[cid])(buf, pos + 1)


def _decode_text(buf: Any, pos: int) -> tuple[str, int]:
    n, pos = read_vlong(buf, pos)
    return bytes(buf[pos:pos + n]).decode("utf-8", "replace"), pos + n


def _decode_bytes(buf: Any, pos: int) -> tuple[bytearray, int]:
    (n,) = _INT.unpack_from(buf, pos)
    return bytearray(buf[pos + 4:pos + 4 + n]), pos + 4 + n


def _fixed(st: struct.Struct) -> Callable[[Any, int], tuple[Any, int]]:
    return lambda buf, pos: (st.unpack_from(buf, pos)[0], pos + st.size)


DECODERS: dict[str, Callable[[Any, int], tuple[Any, int]]] = {
    TEXT: _decode_text,
    INT: _fixed(_INT),
    LONG: _fixed(_LONG),
    FLOAT: _fixed(_FLOAT),
    DOUBLE: _fixed(_DOUBLE),
    BOOLEAN: _fixed(struct.Struct(">?")),
    BYTE: _fixed(struct.Struct(">b")),
    BYTES: _decode_bytes,
    NULL: lambda buf, pos: (None, pos),
    VINT: read_vlong,
    VLONG: read_vlong,
    MAP: _decode_map,
}


def decoder(cls: str) -> Callable[[Any, int], tuple[Any, int]]:
    try:
        return DECODERS[cls]
    except KeyError:
        raise SparkException(f"Ember cannot read Writable class {cls}; it reads "
                             f"{', '.join(sorted(c[len(_IO):] for c in DECODERS))}") from None


def writable_class(value: Any) -> str:
    """The Writable Spark's JavaToWritableConverter makes of a Python value."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        if -(1 << 31) <= value < (1 << 31):
            return INT
        if -(1 << 63) <= value < (1 << 63):
            return LONG
    elif isinstance(value, float):
        return DOUBLE
    elif isinstance(value, str):
        return TEXT
    elif isinstance(value, (bytes, bytearray)):
        return BYTES
    elif isinstance(value, dict):
        return MAP
    raise SparkException(f"Data of type {type(value).__name__} cannot be used")


# what a declared class also takes besides the values it is inferred from
_WIDENS = {LONG: (INT,), DOUBLE: (INT,), FLOAT: (DOUBLE, INT), VINT: (INT,),
           VLONG: (INT, LONG), BYTE: (INT,)}


def encoder_for(declared: str | None, role: str) -> Callable[[bytearray, Any], None]:
    """Encodes one side (key or value) of every record as `declared`, checking each value
    as Hadoop's SequenceFile.Writer checks a record's class."""
    if declared not in ENCODERS:
        raise SparkException(f"Ember cannot write Writable class {declared}")
    encode = ENCODERS[declared]
    accepted = (declared,) + _WIDENS.get(declared, ())

    def checked(out: bytearray, value: Any) -> None:
        cls = writable_class(value)
        if cls not in accepted:
            raise SparkException(f"wrong {role} class: {cls} is not class {declared}")
        try:
            encode(out, value)
        except struct.error as e:
            raise SparkException(f"{value!r} does not fit {declared}: {e}") from None
    return checked


# -- SequenceFile writing ----------------------------------------------------------------

class SequenceFileWriter:
    """Appends records to one SequenceFile (an open binary stream), as Hadoop's Writer."""

    def __init__(self, out: Any, key_class: str, value_class: str,
                 compression: str = "NONE", codec_name: str | None = None) -> None:
        self.out = out
        self.encode_key = encoder_for(key_class, "key")
        self.encode_value = encoder_for(value_class, "value")
        self.compression = compression if codec_name else "NONE"
        self.compress = codec(codec_name)[0] if codec_name else None
        self.sync = os.urandom(SYNC_HASH_SIZE)
        header = bytearray(b"SEQ" + bytes([VERSION]))
        _encode_text(header, key_class)
        _encode_text(header, value_class)
        header += bytes([self.compression != "NONE", self.compression == "BLOCK"])
        if codec_name:
            _encode_text(header, codec_name)
        header += _INT.pack(0)                   # no metadata
        header += self.sync
        out.write(header)
        self.pos = len(header)
        self.last_sync = self.pos
        self.block: list[tuple[bytes, bytes]] = []
        self.block_bytes = 0

    def append(self, key: Any, value: Any) -> None:
        k, v = bytearray(), bytearray()
        self.encode_key(k, key)
        self.encode_value(v, value)
        self.append_raw(k, v)

    def append_raw(self, k: bytes, v: bytes) -> None:
        """A record whose key and value are already serialized as the header's classes."""
        if self.compression == "BLOCK":
            self.block.append((k, v))
            self.block_bytes += len(k) + len(v)
            if self.block_bytes >= BLOCK_SIZE:
                self._write_block()
            return
        if self.compression == "RECORD":
            v = self.compress(bytes(v))
        record = bytearray()
        if self.pos >= self.last_sync + SYNC_INTERVAL:
            record += _INT.pack(SYNC_ESCAPE) + self.sync
            self.last_sync = self.pos
        record += _INT.pack(len(k) + len(v)) + _INT.pack(len(k)) + k + v
        self.out.write(record)
        self.pos += len(record)

    def _write_block(self) -> None:
        if not self.block:
            return
        lengths_k, lengths_v = bytearray(), bytearray()
        for k, v in self.block:
            write_vlong(lengths_k, len(k))
            write_vlong(lengths_v, len(v))
        block = bytearray(_INT.pack(SYNC_ESCAPE) + self.sync)
        write_vlong(block, len(self.block))
        for part in (lengths_k, b"".join(k for k, _ in self.block), lengths_v,
                     b"".join(v for _, v in self.block)):
            data = self.compress(bytes(part))
            write_vlong(block, len(data))
            block += data
        self.out.write(block)
        self.pos += len(block)
        self.block, self.block_bytes = [], 0

    def close(self) -> None:
        self._write_block()


# -- SequenceFile reading ----------------------------------------------------------------

class _Header:
    """A SequenceFile's header, read from `reader` exactly (no read-ahead, no seek: a
    streamed file goes on with the records)."""

    def __init__(self, reader: Any) -> None:
        head = reader.read(4)
        if head[:3] != b"SEQ":
            raise SparkException(f"{getattr(reader, 'name', 'input')} is not a SequenceFile")
        if head[3] != VERSION:
            raise SparkException(f"SequenceFile version {head[3]}: Ember reads version "
                                 f"{VERSION}, the one Hadoop writes")
        self.end = 4
        self.key_class, self.value_class = self._text(reader), self._text(reader)
        flags = self._exactly(reader, 2)
        self.compressed, self.block = bool(flags[0]), bool(flags[1])
        self.decompress = codec(self._text(reader))[1] if self.compressed else None
        (entries,) = _INT.unpack(self._exactly(reader, 4))
        for _ in range(2 * entries):        # metadata: names and values, unused
            self._text(reader)
        self.sync = self._exactly(reader, SYNC_HASH_SIZE)

    def _exactly(self, reader: Any, n: int) -> bytes:
        data = reader.read(n)
        if len(data) < n:
            raise ValueError("the file ends inside its header")
        self.end += n
        return data

    def _text(self, reader: Any) -> str:
        n, size = _read_vlong_from(reader)
        self.end += size
        return self._exactly(reader, n).decode("utf-8", "replace")


def buffered(f: Any) -> Any:
    """`f` as a buffered stream (one that reads ahead and peeks)."""
    return f if isinstance(f, io.BufferedIOBase) else io.BufferedReader(f, 1 << 16)


def read_sequence_file(f: Any, start: int, end: float) -> Iterator[tuple[Any, Any]]:
    """The (key, value) records of the split [start, end) of a SequenceFile open as `f`."""
    reader = buffered(f)
    header = _Header(reader)
    decode_key, decode_value = decoder(header.key_class), decoder(header.value_class)
    for k, v in _raw_records(reader, header, start, end):
        yield decode_key(k, 0)[0], decode_value(v, 0)[0]


def _raw_records(reader: Any, header: _Header, start: int,
                 end: float) -> Iterator[tuple[Any, Any]]:
    """The serialized (key, value) of each record of the split, values decompressed, from
    the buffered `reader` just past the header (it seeks only for a split after the first)."""
    pos = header.end
    if start > 0:
        pos = _find_sync(reader, max(start, header.end), end, header.sync)
        if pos is None:
            return
        reader.seek(pos)
    while True:
        head = reader.read(4)
        if len(head) < 4:
            return
        (length,) = _INT.unpack(head)
        if length == SYNC_ESCAPE:
            if reader.read(SYNC_HASH_SIZE) != header.sync:
                raise ValueError("a sync marker does not match the header's")
            if pos >= end:
                return                      # the next split's records
            pos += SYNC_SIZE
            if header.block:
                records, used = _read_block(reader, header)
                pos += used
                yield from records
            continue
        (key_length,) = _INT.unpack(reader.read(4))
        body = reader.read(length)
        if len(body) < length:
            raise ValueError("the file ends inside a record")
        pos += 8 + length
        value = body[key_length:]
        yield body, (value if header.decompress is None else header.decompress(value))


def _read_vlong_from(reader: Any) -> tuple[int, int]:
    """(value, size) of the vint next in a stream."""
    first = reader.read(1)
    if not first:
        raise ValueError("the file ends inside a number")
    n = _vlong_size(_signed(first[0]))
    return read_vlong(first + reader.read(n - 1), 0)[0], n


def _read_block(reader: Any, header: _Header) -> tuple[list[tuple[bytes, bytes]], int]:
    count, used = _read_vlong_from(reader)
    parts = []
    for _ in range(4):
        size, n = _read_vlong_from(reader)
        parts.append(header.decompress(reader.read(size)))
        used += n + size
    key_lengths, keys, value_lengths, values = parts
    records = []
    kp = vp = ko = vo = 0
    for _ in range(count):
        kn, kp = read_vlong(key_lengths, kp)
        vn, vp = read_vlong(value_lengths, vp)
        records.append((keys[ko:ko + kn], values[vo:vo + vn]))
        ko += kn
        vo += vn
    return records, used


def _find_sync(f: Any, start: int, end: float, sync: bytes) -> int | None:
    """The position of the escape before the first sync marker at or after `start` (4
    bytes before the marker), if that is before `end`."""
    f.seek(start + 4)
    carry = b""
    base = start + 4
    while True:
        chunk = f.read(1 << 16)
        if not chunk:
            return None
        data = carry + chunk
        at = data.find(sync)
        if at >= 0:
            pos = base + at - 4
            return pos if pos < end else None
        carry = data[-(SYNC_HASH_SIZE - 1):]
        base += len(data) - len(carry)
        if base - 4 >= end:             # a marker found from here on starts past the split
            return None


# -- text formats ------------------------------------------------------------------------

def read_text_lines(f: Any, start: int, end: float) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of the lines that start at or before `end`, as Hadoop's
    LineRecordReader: a split after the first skips the line under its start (that line,
    even one starting right there, is the previous split's last)."""
    f.seek(start)
    reader = io.BufferedReader(f, 1 << 16) if not isinstance(f, io.BufferedIOBase) else f
    pos = start
    if start:
        pos += len(reader.readline())
    while pos <= end:
        line = reader.readline()
        if not line:
            return
        yield pos, line.rstrip(b"\r\n")
        pos += len(line)


def java_string(value: Any) -> str:
    """What the Writable Spark makes of `value` prints (TextOutputFormat writes toString)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, (bytes, bytearray)):
        return " ".join(f"{b:02x}" for b in value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{java_string(k)}={java_string(v)}"
                               for k, v in value.items()) + "}"
    if value is None:
        return "(null)"
    writable_class(value)                   # refuses what Spark refuses
    return str(value)


def _java_double(d: float) -> str:
    """Java's Double.toString: plain from 1e-3 to 1e7, else d.dddE<n>, shortest digits."""
    if d != d or d in (math.inf, -math.inf):
        return "NaN" if d != d else ("Infinity" if d > 0 else "-Infinity")
    if d == 0 or 1e-3 <= abs(d) < 1e7:
        return repr(d)
    sign, digits, exponent = decimal.Decimal(repr(d)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    scientific = len(digits) + int(exponent) - 1
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{scientific}"


def text_line(key: Any, value: Any) -> bytes | None:
    """TextOutputFormat's line for a record: key TAB value, a None side left out, nothing
    for two."""
    if key is None and value is None:
        return None
    if key is None or value is None:
        text = java_string(value if key is None else key)
    else:
        text = f"{java_string(key)}\t{java_string(value)}"
    return text.encode("utf-8") + b"\n"


def conf_value(conf: dict[str, str] | None, *keys: str) -> str | None:
    """The first of Hadoop's names (new, then deprecated) that `conf` sets."""
    for key in keys:
        if conf and conf.get(key) is not None:
            return conf[key]
    return None


def input_dir(conf: dict[str, str] | None) -> str:
    """hadoopRDD's input path, from the Hadoop configuration."""
    path = conf_value(conf, "mapreduce.input.fileinputformat.inputdir", "mapred.input.dir")
    if path is None:
        raise SparkException("No input paths specified in job")
    return path


def refuse_converters(*converters: str | None) -> None:
    if any(converters):
        raise SparkException(
            "keyConverter and valueConverter name JVM classes, and Ember has no JVM: convert "
            "the pairs with map() in Python instead")


def read_split(f: Any, start: int, end: float, input_format: str,
               conf: dict[str, str] | None, name: str = "") -> Iterator[tuple[Any, Any]]:
    """The records of one split of the file `name` open as `f`, as `input_format` reads
    them. A SequenceFile that does not parse fails the task naming the file."""
    if input_format in SEQUENCE_INPUT:
        yield from _parsed(read_sequence_file(f, start, end), name)
    elif input_format in TEXT_INPUT:
        for offset, line in read_text_lines(f, start, end):
            yield offset, line.decode("utf-8", "replace")
    else:
        separator = (conf_value(conf, "mapreduce.input.keyvaluelinerecordreader.key.value."
                                "separator", "key.value.separator.in.input.line") or "\t")
        for _, line in read_text_lines(f, start, end):
            key, _, value = line.decode("utf-8", "replace").partition(separator[:1])
            yield key, value


OLD_API, NEW_API = "org.apache.hadoop.mapred.", "org.apache.hadoop.mapreduce."


def _parsed(records: Iterator[Any], name: str) -> Iterator[Any]:
    """`records`, a SequenceFile that does not parse failing the task with the file's name."""
    try:
        yield from records
    except (IndexError, KeyError, ValueError, struct.error, zlib.error) as e:
        raise SparkException(f"{name} is a corrupt SequenceFile: {type(e).__name__}: {e}") \
            from e


def check_format(name: str, api: str, known: frozenset[str], kind: str) -> None:
    """`name` is a format Ember has, of the API (old mapred or new mapreduce) the method
    takes: as in Spark, hadoopFile refuses a new-API format and newAPIHadoopFile an old one."""
    if name not in known:
        raise SparkException(f"Ember has no {kind} format {name!r}; it has "
                             f"{', '.join(sorted(known))}")
    if not name.startswith(api):
        raise SparkException(f"{name} is not an {api}{kind.capitalize()}Format: this method "
                             f"takes the {'old' if api == OLD_API else 'new'} API's formats")


INPUT_FORMATS = SEQUENCE_INPUT | TEXT_INPUT | KEY_VALUE_INPUT
OUTPUT_FORMATS = SEQUENCE_OUTPUT | TEXT_OUTPUT


# -- PySpark's pickle files: SequenceFile<NullWritable, BytesWritable> of Java-serialized
# byte[][] (Spark's saveAsObjectFile: ten of PySpark's pickled batches a record) ----------

_JAVA_MAGIC = b"\xac\xed\x00\x05"
# TC_ARRAY, TC_CLASSDESC "[[B" with its serialVersionUID, SC_SERIALIZABLE, no fields,
# TC_ENDBLOCKDATA, no superclass (TC_NULL); then the same for "[B"; later "[B" arrays name
# that class by its handle (TC_REFERENCE 0x7e0002)
_ARRAY_OF_ARRAYS = b"\x75\x72\x00\x03[[B\x4b\xfd\x19\x15\x67\x67\xdb\x37\x02\x00\x00\x78\x70"
_FIRST_ARRAY = b"\x75\x72\x00\x02[B\xac\xf3\x17\xf8\x06\x08\x54\xe0\x02\x00\x00\x78\x70"
_NEXT_ARRAY = b"\x75\x71\x00\x7e\x00\x02"
OBJECTS_PER_RECORD = 10


def java_byte_arrays(chunks: list[bytes]) -> bytes:
    """A byte[][] as java.io.ObjectOutputStream writes it."""
    parts = [_JAVA_MAGIC, _ARRAY_OF_ARRAYS, _INT.pack(len(chunks))]
    for i, chunk in enumerate(chunks):
        parts += (_NEXT_ARRAY if i else _FIRST_ARRAY, _INT.pack(len(chunk)), chunk)
    return b"".join(parts)


def from_java_byte_arrays(data: Any) -> list[memoryview]:
    """The byte arrays of a Java-serialized byte[][] (what java_byte_arrays writes, the
    form Spark's saveAsObjectFile gives PySpark's pickled batches), as views of `data`."""
    data = memoryview(data)
    head = len(_JAVA_MAGIC) + len(_ARRAY_OF_ARRAYS)
    if data[:head] != _JAVA_MAGIC + _ARRAY_OF_ARRAYS:
        raise SparkException("not a pickle file: a record is not a serialized byte[][]")
    (count,) = _INT.unpack_from(data, head)
    pos, chunks = head + 4, []
    for i in range(count):
        prefix = _NEXT_ARRAY if i else _FIRST_ARRAY
        if data[pos:pos + len(prefix)] != prefix:
            raise SparkException("not a pickle file: unexpected Java serialization")
        pos += len(prefix)
        (n,) = _INT.unpack_from(data, pos)
        chunks.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    return chunks


def write_pickle_file(f: Any, values: Iterator[Any], batch_size: int) -> None:
    """saveAsPickleFile's part file, readable by PySpark's pickleFile."""
    writer = SequenceFileWriter(f, NULL, BYTES)
    record: list[bytes] = []
    for batch in _batches(values, batch_size):
        record.append(pickle.dumps(batch, pickle.HIGHEST_PROTOCOL))
        if len(record) == OBJECTS_PER_RECORD:
            writer.append_raw(b"", _bytes_writable(java_byte_arrays(record)))
            record = []
    if record:
        writer.append_raw(b"", _bytes_writable(java_byte_arrays(record)))


def _batches(values: Iterator[Any], size: int) -> Iterator[list]:
    it = iter(values)
    while batch := list(islice(it, size)):
        yield batch


def _bytes_writable(data: bytes) -> bytes:
    return _INT.pack(len(data)) + data


def read_pickle_records(f: Any, name: str) -> Iterator[Any]:
    """The values of a pickle file written by PySpark's saveAsPickleFile (or Ember's)."""
    reader = buffered(f)
    header = _Header(reader)
    if (header.key_class, header.value_class) != (NULL, BYTES):
        raise SparkException(f"{name} is not a pickle file: a SequenceFile of "
                             f"{header.key_class}, {header.value_class}")
    for _, value in _parsed(_raw_records(reader, header, 0, math.inf), name):
        for chunk in from_java_byte_arrays(memoryview(value)[4:]):
            batch = pickle.loads(chunk)
            if isinstance(batch, list):
                yield from batch
            else:
                yield batch
