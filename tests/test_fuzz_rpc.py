"""Property-based fuzzing (hypothesis) of the RPC wire format: the frame reader, the frame
parsers, the per-frame MAC/AES-GCM and the msgpack message codec. Whatever the bytes, the
only outcomes are a value or the documented error; nothing else is ever raised."""
from __future__ import annotations

import struct

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.deploy import messages as deploy_messages  # noqa: F401  (registers the types)
from ember.rpc import framing
from ember.rpc.messages import MessageDecodeError, decode, encode

FAST = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

frame_types = st.sampled_from([framing.ONE_WAY, framing.REQUEST, framing.RESPONSE])
names = st.text(min_size=1, max_size=20)
bodies = st.binary(max_size=300)


def _frame(ftype: int, name: str, body: bytes, req_id: int) -> bytes:
    if ftype == framing.ONE_WAY:
        return framing.one_way_header(name.encode(), len(body)) + body
    if ftype == framing.REQUEST:
        return framing.request_header(req_id, name.encode(), len(body)) + body
    return framing.response_header(req_id, True, len(body)) + body


def _parse(ftype: int, payload: bytes):
    if ftype == framing.ONE_WAY:
        name, body = framing.parse_one_way(payload)
        return name, bytes(body)
    if ftype == framing.REQUEST:
        req_id, name, body = framing.parse_request(payload)
        return req_id, name, bytes(body)
    req_id, ok, body = framing.parse_response(payload)
    return req_id, ok, bytes(body)


@FAST
@given(st.lists(st.tuples(frame_types, names, bodies, st.integers(0, 2 ** 64 - 1)),
                max_size=8), st.data())
def test_frames_round_trip_however_the_stream_is_split(frames, data):
    stream = b"".join(_frame(*f) for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    reader = framing.FrameReader(1 << 20)
    got = []
    prev = 0
    for cut in cuts + [len(stream)]:
        reader.feed(stream[prev:cut])
        prev = cut
        while (f := reader.next_frame()) is not None:
            got.append(f)
    assert [t for t, _ in got] == [f[0] for f in frames]
    for (ftype, payload), (t, name, body, req_id) in zip(got, frames):
        parsed = _parse(ftype, payload)
        assert parsed[-1] == body
        assert name in parsed or t == framing.RESPONSE


@FAST
@given(st.binary(max_size=2000), st.integers(1, 4096))
def test_arbitrary_bytes_only_raise_frame_errors(blob, limit):
    reader = framing.FrameReader(limit)
    reader.feed(blob)
    for _ in range(len(blob) + 1):
        try:
            f = reader.next_frame()
        except framing.FrameTooLargeError:
            return                          # the connection is dropped here
        except framing.FrameError:
            continue
        if f is None:
            return
        ftype, payload = f
        for parse in (framing.parse_one_way, framing.parse_request, framing.parse_response,
                      framing.parse_hello):
            try:
                parse(payload)
            except framing.FrameError:
                pass


@FAST
@given(st.binary(max_size=200))
def test_greetings_and_hellos_only_raise_their_errors(blob):
    try:
        framing.parse_greeting(blob.ljust(framing.GREETING_LEN, b"\0"))
    except framing.HandshakeError:
        pass
    try:
        framing.parse_hello(blob)
    except framing.FrameError:
        pass


@FAST
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=5), st.booleans(),
       st.integers(0, 10_000), st.integers(0, 7))
def test_sealed_frames_round_trip_and_any_flipped_bit_is_caught(contents, gcm, pos, bit):
    key = b"k" * 32
    make = framing.GcmSealer if gcm else framing.MacSealer
    out, inn = make(key), make(key)
    wire = []
    for c in contents:
        parts = out.seal([bytes([framing.ONE_WAY]), c])
        wire.append(b"".join(bytes(p) for p in parts))
    for w, c in zip(wire, contents):
        assert bytes(inn.open(w[4:])) == bytes([framing.ONE_WAY]) + c
    # the same frames, one bit flipped somewhere: refused (and so is a replay)
    tampered_in = make(key)
    w = bytearray(wire[0][4:])
    w[pos % len(w)] ^= 1 << bit
    try:
        tampered_in.open(bytes(w))
        raise AssertionError("a flipped bit was accepted")
    except framing.FrameError:
        pass
    replay = make(key)
    replay.open(wire[0][4:])
    try:
        replay.open(wire[0][4:])
        raise AssertionError("a replayed frame was accepted")
    except framing.FrameError:
        pass


# -- the message codec ---------------------------------------------------------------------

msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 64 - 1) | st.floats()
    | st.text(max_size=20) | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8) | st.sampled_from(
        ["__m__", "__ref__", "__addr__", "__enum__"]), children, max_size=4),
    max_leaves=20)

message_names = st.sampled_from(["LaunchDriver", "LaunchExecutor", "RegisterWorker",
                                 "StatusUpdate", "LaunchTask", "RequestSubmitDriver",
                                 "Heartbeat", "FetchShuffleBlocks", "KillDriver", "Nope"])


@FAST
@given(st.binary(max_size=500))
def test_decoding_arbitrary_bytes_only_raises_message_decode_error(blob):
    try:
        decode(blob)
    except MessageDecodeError:
        pass


@FAST
@given(message_names, st.dictionaries(st.text(max_size=12), msgpack_values, max_size=6))
def test_forged_messages_are_checked_field_by_field(name, fields):
    blob = msgpack.packb({"__m__": name, **fields}, use_bin_type=True)
    try:
        value = decode(blob)
    except MessageDecodeError:
        return
    assert type(value).__name__ == name      # well formed after all: it must re-encode
    assert encode(decode(encode(value))) == encode(value)


@FAST
@given(msgpack_values)
def test_any_msgpack_value_decodes_or_is_refused(value):
    try:
        blob = msgpack.packb(value, use_bin_type=True)
    except (OverflowError, ValueError):
        return
    try:
        decode(blob)
    except MessageDecodeError:
        pass


def test_a_frame_header_alone_cannot_make_the_reader_buffer():
    reader = framing.FrameReader(1024)
    reader.feed(struct.pack(">I", 1 << 31))
    try:
        reader.next_frame()
        raise AssertionError("an oversized frame was accepted")
    except framing.FrameTooLargeError as e:
        assert e.size == 1 << 31
