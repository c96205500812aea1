"""The shuffle's map and reduce sides without a scheduler: what a map task writes (sparse
segments, one appended file per process, small outputs inline, sealed segments that decrypt
alone), that a reducer reads back exactly its records, batches its remote fetches, and
turns a missing output into a FetchFailedError naming that map; and how the tracker moves a
migrated file's outputs."""
from __future__ import annotations

import os
import pickle
from types import SimpleNamespace

import pytest

from ember.errors import TaskKilledException
from ember.partitioner import portable_hash
from ember.scheduler.map_output_tracker import MapOutputTracker
from ember.shuffle.base import FetchFailedError, MapStatus, StageStatuses
from ember.shuffle.crypto import Sealer
from ember.shuffle import reader
from ember.shuffle.reader import read_partition, read_segments, segment_files
from ember.shuffle.writer import INLINE_BYTES, output_file_base, write_map_output

os.environ.setdefault("PYTHONHASHSEED", "0")
KEY = b"k" * 32


def _write(tmp_path, records, n, map_index=0, memory_mb=512, io_key=None, executor="exec-1",
           address=""):
    spill_base = str(tmp_path / f"spill_{map_index}")
    return write_map_output(records, n, portable_hash, spill_base,
                            output_file_base(str(tmp_path), 7), memory_mb, executor, "host-1",
                            address, io_key=io_key)


def _read(statuses, reduce_id, io_key=None, executor="exec-1", fetch=None, **env):
    return list(_reader(statuses, reduce_id, io_key, executor, fetch, **env))


def _reader(statuses, reduce_id, io_key=None, executor="exec-1", fetch=None, metrics=None,
            **env):
    ctx = SimpleNamespace(map_locations={7: statuses}, metrics={} if metrics is None else metrics,
                          env=SimpleNamespace(executor_id=executor, host="host-1",
                                              io_key=io_key, fetch_remote=fetch, **env))
    return read_partition(7, reduce_id, ctx)


def _reader_of_maps(statuses, reduce_id, maps, fetch=None):
    ctx = SimpleNamespace(map_locations={7: statuses}, metrics={},
                          env=SimpleNamespace(executor_id="exec-1", host="host-1",
                                              io_key=None, fetch_remote=fetch))
    return list(read_partition(7, reduce_id, ctx, None, maps))


def _serving(requests, outstanding=None):
    """A peer serving FetchShuffleBlocks from the test's files: sends are recorded, and the
    bytes asked and not yet taken are tracked in `outstanding` [now, most]."""
    def fetch(address, endpoint, shuffle_id, segments):
        paths, starts, ends = (list(x) for x in zip(*segments))
        size = sum(e - s for s, e in zip(starts, ends))
        requests.append((address, endpoint, shuffle_id, len(segments)))
        if outstanding is not None:
            outstanding[0] += size
            outstanding[1] = max(outstanding[1], outstanding[0])
        data = read_segments(segment_files(paths, starts, ends, lambda p: True), starts, ends)

        def wait():
            if outstanding is not None:
                outstanding[0] -= size
            out, pos = [], 0
            for s, e in zip(starts, ends):
                out.append(data[pos:pos + e - s])
                pos += e - s
            return out
        return wait
    return fetch


def test_only_non_empty_segments_and_small_outputs_inline(tmp_path):
    records = [(k, k * 10) for k in (3, 9_999, 5_000, 3)]
    st = _write(tmp_path, records, 10_000)
    assert [r for r, _s, _e in st.segments()] == [3, 5_000, 9_999]
    assert st.data is not None and len(st.data) <= INLINE_BYTES and st.path == ""
    assert not list(tmp_path.iterdir())          # no file at all
    assert _read([st], 3) == [(3, 30), (3, 30)]
    assert _read([st], 4) == []


def test_map_outputs_of_a_process_share_one_appended_file(tmp_path):
    statuses = [_write(tmp_path, [(i % 50, (m, i)) for i in range(2_000)], 50, m)
                for m in range(3)]
    assert all(st.data is None for st in statuses)
    assert len({st.path for st in statuses}) == 1
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(statuses[0].path) + ".data"]
    got = _read(statuses, 7)
    assert got == [(7, (m, i)) for m in range(3) for i in range(2_000) if i % 50 == 7]


def test_an_output_of_more_segments_than_one_writev_takes_lands_whole_and_in_order(
        tmp_path, monkeypatch):
    """Pieces go out in writev calls of at most _IOV_MAX, each appended where the last
    ended, also after another map's output and for one that spilled."""
    from ember.shuffle import writer
    monkeypatch.setattr(writer, "_CHECK_EVERY", 1024)      # the 1 MB budget is checked
    spills = []
    real_spill = writer._spill
    monkeypatch.setattr(writer, "_spill", lambda *a: spills.append(1) or real_spill(*a))
    n = 3 * writer._IOV_MAX + 7
    first = _write(tmp_path, [(k, "x" * 400) for k in range(5)], n, 0)
    wide = _write(tmp_path, [(k, k) for k in range(n)] * 2, n, 1)
    spilled = _write(tmp_path, [(k % 3, "y" * 600) for k in range(6_000)], n, 2, memory_mb=0)
    statuses = [first, wide, spilled]
    assert not [p for p in tmp_path.iterdir() if ".spill" in p.name]
    assert spills and spilled.records_written == 6_000
    assert {st.path for st in statuses} == {first.path} and first.data is None
    assert os.path.getsize(first.path + ".data") == sum(st.bytes_written for st in statuses)
    for r in (0, 2, 4, 5, writer._IOV_MAX, n - 1):
        assert _read(statuses, r) == ([(r, "x" * 400)] if r < 5 else []) + [(r, r)] * 2 \
            + ([(r, "y" * 600)] * 2_000 if r < 3 else [])


def test_a_partition_that_fills_batches_keeps_them_in_order_beside_single_batch_ones(tmp_path):
    records = [(0, i) for i in range(2_500)] + [(1, "a"), (2, "b"), (0, "last")]
    st = _write(tmp_path, records, 4)
    assert [r for r, _s, _e in st.segments()] == [0, 1, 2]
    assert st.bytes_written == sum(e - s for _r, s, e in st.segments())
    assert st.records_written == len(records)
    assert _read([st], 0) == [(0, i) for i in range(2_500)] + [(0, "last")]
    assert _read([st], 1) == [(1, "a")] and _read([st], 3) == []


@pytest.mark.parametrize("streamed", [False, True])
def test_a_reducer_reads_many_maps_inline_and_filed_in_map_order(tmp_path, monkeypatch, streamed):
    """A reducer's segments of many maps are read one by one and unpickled together: every
    record comes back once, in map order, whatever mix of inline outputs, outputs in the
    process's file and a segment of several batches it is, also when that segment is too
    large to read whole and is streamed from the file."""
    if streamed:
        monkeypatch.setattr(reader, "_PREAD_BYTES", 5_000)
    statuses = []
    for m in range(40):
        if m % 3 == 0:      # inline: a record or two per reducer
            records = [(r, (m, r)) for r in range(8)]
        elif m == 7:        # one reducer's segment spans several batches
            records = [(i % 8, (m, i)) for i in range(8 * 1500)]
        else:
            records = [(r, (m, r, "v" * 300)) for r in range(8)]
        statuses.append(_write(tmp_path, records, 8, m))
    assert {st.data is None for st in statuses} == {True, False}
    for r in range(8):
        want = []
        for m in range(40):
            if m % 3 == 0:
                want.append((r, (m, r)))
            elif m == 7:
                want += [(r, (m, i)) for i in range(r, 8 * 1500, 8)]
            else:
                want.append((r, (m, r, "v" * 300)))
        assert _read(statuses, r) == want
    # the maps' one file was opened once for the shuffle, not per map or reducer
    assert list(reader._indexes[7][2]) == [statuses[1].path + ".data"]


def test_a_map_output_file_cut_short_after_reducers_opened_it_is_a_fetch_failure(tmp_path):
    statuses = [_write(tmp_path, [(r, "w" * 2000) for r in range(3)], 3, m) for m in range(2)]
    assert len(_read(statuses, 0)) == 2          # the file is now open in the reader
    (_r, start, _end), = [seg for seg in statuses[1].segments() if seg[0] == 2]
    with open(statuses[1].path + ".data", "r+b") as f:
        f.truncate(start + 10)      # the second map's segment for reducer 2 cut short
    with pytest.raises(FetchFailedError) as e:
        _read(statuses, 2)
    assert (e.value.map_index, e.value.reduce_id) == (1, 2)
    assert "ends before byte" in e.value.message


def test_a_map_status_pickles_every_field():
    st = MapStatus("exec-9", "host-9", "/w/shuffle_1_2_3", 300, 12, "host-9:7337",
                   "ExternalShuffleService", b"\x01" * 24, b"data")
    back = pickle.loads(pickle.dumps(st, 5))
    assert back == st and vars(back) == vars(st)
    other = MapStatus("exec-9", "host-9", "/w/shuffle_1_2_3", 10, 1, data=b"x")
    # a stage's statuses travel as rows of fields; a missing output stays None in its place
    statuses = pickle.loads(pickle.dumps({1: StageStatuses([st, None, other])}, 5))[1]
    assert statuses == [st, None, other] and type(statuses) is list
    assert vars(statuses[0]) == vars(st) and vars(statuses[2]) == vars(other)

    def received():
        return pickle.loads(pickle.dumps(MapStatus("e", "h", "/w/".join("ab"), 1, 1)))
    assert received().path is received().path   # interned: a stage's statuses share it


def test_spilled_outputs_keep_only_their_non_empty_segments(tmp_path):
    records = [(i % 3 * 1000, "x" * 200) for i in range(60_000)]     # > 1 MB: spills
    st = _write(tmp_path, records, 5_000, memory_mb=1)
    assert [r for r, _s, _e in st.segments()] == [0, 1000, 2000]
    assert not [p for p in tmp_path.iterdir() if ".spill" in p.name]
    assert len(_read([st], 1000)) == 20_000


def test_encrypted_segments_decrypt_alone(tmp_path):
    """spark.io.encryption.enabled: each segment (inline or in the file) is a run of sealed
    batches, so a reducer decrypts just its own range; no record is in the clear."""
    mark = "SEALED-MARK"
    big = _write(tmp_path, [(i % 20, mark) for i in range(4_000)], 20, io_key=KEY)
    small = _write(tmp_path, [(5, mark)], 20, 1, io_key=KEY)
    assert big.data is None and small.data is not None
    assert mark.encode() not in open(big.path + ".data", "rb").read() + small.data
    for r, start, end in big.segments():
        plain = [r for batch in Sealer(KEY).batches_from_bytes(
            read_segments([big.path + ".data"], [start], [end])) for r in batch]
        assert plain == [(r, mark)] * 200
    assert _read([big, small], 5, io_key=KEY) == [(5, mark)] * 201
    with pytest.raises(ValueError, match="does not decrypt"):
        _read([big], 5, io_key=b"x" * 32)


def test_remote_fetches_are_pipelined_within_max_size_in_flight(tmp_path):
    """Segments served by other executors are fetched per address, several per request of
    about maxSizeInFlight / 5, the sources interleaved; requests are sent ahead (the next
    ones are out before the first batch's records are merged) while the bytes asked and not
    yet taken stay within maxSizeInFlight (Spark's ShuffleBlockFetcherIterator)."""
    statuses = [_write(tmp_path, [(i % 4, (m, i)) for i in range(1_000)], 4, m,
                       executor=f"exec-{2 + m % 2}", address=f"10.0.0.{2 + m % 2}:7337")
                for m in range(12)]         # two sources, interleaved in map order
    size = max(e - s for st in statuses for r, s, e in st.segments() if r == 1)
    requests, outstanding = [], [0, 0]
    limit = 10 * size                     # requests of 2 segments, at most 5 in flight
    records = _reader(statuses, 1, fetch=_serving(requests, outstanding),
                      max_bytes_in_flight=limit)
    got = [next(records)]
    assert len(requests) >= 5             # sent ahead while the first batch is merged
    got += list(records)
    assert sorted(got) == [(1, (m, i)) for m in range(12) for i in range(1_000) if i % 4 == 1]
    assert requests == [("10.0.0.2:7337", "Executor", 7, 2),
                        ("10.0.0.3:7337", "Executor", 7, 2)] * 3
    assert outstanding == [0, outstanding[1]] and outstanding[1] <= limit

    requests.clear()                      # maxReqsInFlight=1: one request at a time
    records = _reader(statuses, 1, fetch=_serving(requests), max_bytes_in_flight=limit,
                      max_reqs_in_flight=1)
    next(records)                         # the first taken, the second sent
    assert len(requests) == 2 and len(list(records)) == 12 * 250 - 1 and len(requests) == 6


def test_a_reducer_reads_a_range_of_maps_only(tmp_path):
    """A cogroup's side is a range of the union's maps: only their segments are read
    (inline, in this process's file, or fetched), in map order."""
    statuses = []
    for m in range(9):
        remote = dict(executor="exec-2", address="10.0.0.2:7337") if m % 3 == 2 else {}
        records = ([(1, (m, 0))] if m % 3 == 0 else      # inline
                   [(i % 2, (m, i, "v" * 300)) for i in range(40)])
        statuses.append(_write(tmp_path, records, 2, m, **remote))
    everything = _read(statuses, 1, fetch=_serving([]))
    requests: list = []
    for first, end in ((0, 4), (4, 9), (3, 3), (8, 20)):
        got = _reader_of_maps(statuses, 1, (first, end), fetch=_serving(requests))
        assert got == [r for r in everything if first <= r[1][0] < end]
    assert [n for *_, n in requests] == [1, 2, 1]      # maps 2 | 5, 8 | none | 8


def test_other_executors_files_on_this_host_are_read_from_disk(tmp_path):
    """spark.shuffle.readHostLocalDisk: another executor's output on the same host is read
    from its file, counted as local; a file this process cannot open is fetched instead."""
    st = _write(tmp_path, [(1, "y" * 3000)], 4, executor="exec-2", address="10.0.0.2:7337")
    requests, metrics = [], {}
    got = list(_reader([st], 1, fetch=_serving(requests), metrics=metrics,
                       read_host_local_disk=True))
    assert got == [(1, "y" * 3000)] and requests == []
    assert metrics["shuffleLocalBytesRead"] > 0 and metrics["shuffleRemoteBytesRead"] == 0
    assert _read([st], 1, fetch=_serving(requests)) == got and len(requests) == 1   # off
    gone = MapStatus(st.executor_id, st.host, str(tmp_path / "elsewhere" / "shuffle_7_1_1"),
                     st.bytes_written, 1, st.address, st.endpoint, st.blocks)
    requests.clear()

    def fetch(address, endpoint, shuffle_id, segments):     # the peer still has it
        return _serving(requests)(address, endpoint, shuffle_id,
                                  [(st.path, s, e) for _p, s, e in segments])
    assert _read([gone], 1, fetch=fetch, read_host_local_disk=True) == got
    assert len(requests) == 1


def test_a_failed_remote_fetch_is_a_fetch_failure_naming_the_batch_map(tmp_path):
    statuses = [_write(tmp_path, [(1, "y" * 3000)], 4, m, executor="exec-2",
                       address="10.0.0.2:7337") for m in range(2)]

    def fetch(address, endpoint, shuffle_id, segments):
        def wait():
            raise ConnectionError("peer lost")
        return wait
    with pytest.raises(FetchFailedError, match="peer lost") as e:
        _read(statuses, 1, fetch=fetch)
    assert (e.value.map_index, e.value.reduce_id, e.value.status) == (0, 1, statuses[0])


def test_a_missing_map_output_is_a_fetch_failure(tmp_path):
    st = _write(tmp_path, [(1, 1)], 4)
    with pytest.raises(FetchFailedError) as e:
        _read([st, None], 1)
    assert (e.value.map_index, e.value.reduce_id) == (1, 1)


def test_a_removed_output_file_is_a_fetch_failure_naming_its_map(tmp_path):
    small = _write(tmp_path, [(1, 1)], 4)
    big = _write(tmp_path, [(1, "y" * 3000)], 4, 1)
    os.unlink(big.path + ".data")
    with pytest.raises(FetchFailedError) as e:
        _read([small, big], 1)
    assert (e.value.map_index, e.value.reduce_id, e.value.status) == (1, 1, big)
    again = _write(tmp_path, [(1, "z" * 3000)], 4, 1)    # the writer notices and reopens
    assert os.path.exists(again.path + ".data") and _read([small, again], 1)[1] == (1, "z" * 3000)


def test_a_reducer_whose_index_was_evicted_meanwhile_still_reads_its_own_files(
        tmp_path, monkeypatch):
    """More shuffles read at once in one task than the reader keeps indexes of: the first
    reducer's files are closed under it, and the descriptor numbers reused by the others'
    files must not be read in their place."""
    monkeypatch.setattr(reader, "_MERGE_BYTES", 1)      # a segment's records go out at once

    def outputs(sid):
        return [write_map_output([(0, (sid, m, "x" * 2000))], 1, portable_hash,
                                 str(tmp_path / f"spill_{sid}_{m}"),
                                 output_file_base(str(tmp_path), sid), 512, "exec-1", "host-1")
                for m in range(3)]

    def ctx(sid, statuses):
        return SimpleNamespace(map_locations={sid: statuses}, metrics={},
                               env=SimpleNamespace(executor_id="exec-1", host="host-1"))
    first = reader.read_partition(7, 0, ctx(7, outputs(7)))
    assert next(first)[1][:2] == (7, 0)
    for sid in range(100, 100 + reader._MAX_INDEXES):
        assert [r[1][:2] for r in reader.read_partition(sid, 0, ctx(sid, outputs(sid)))] == [
            (sid, 0), (sid, 1), (sid, 2)]
    assert [r[1][:2] for r in first] == [(7, 1), (7, 2)]


def test_a_kill_while_a_reducer_plans_its_reads_caches_no_part_of_the_plan(tmp_path,
                                                                           monkeypatch):
    """A task is killed by a signal between any two of its steps; one killed while the
    process's read plan was half made left the next reducer a plan shorter than the maps
    (IndexError)."""
    statuses = [_write(tmp_path, [(0, "s")], 1, map_index=0)]           # inline
    statuses += [_write(tmp_path, [(0, "x" * 2000)], 1, map_index=m) for m in (1, 2)]
    assert statuses[0].data is not None and statuses[1].data is None
    cached_fd = reader._cached_fd
    killed = []

    def kill_at_the_first_file(fds, path):
        if not killed:
            killed.append(path)
            raise TaskKilledException()
        return cached_fd(fds, path)
    monkeypatch.setattr(reader, "_cached_fd", kill_at_the_first_file)
    with pytest.raises(TaskKilledException):
        _read(statuses, 0)
    assert sorted(v for _k, v in _read(statuses, 0)) == ["s", "x" * 2000, "x" * 2000]
    reader.forget_shuffle(7)


def test_peers_are_served_only_map_output_files_and_ranges_inside_them(tmp_path):
    st = _write(tmp_path, [(1, "y" * 3000)], 4)
    (tmp_path / "secret.data").write_bytes(b"s" * 10)
    inside = lambda p: p.startswith(str(tmp_path) + os.sep)   # noqa: E731
    assert segment_files([st.path], [0], [5], inside) == [st.path + ".data"]
    for paths, starts, ends, why in (
            ([str(tmp_path / "secret")], [0], [5], "Invalid shuffle block path"),
            ([str(tmp_path / ".." / "shuffle_7_1_1")], [0], [5], "Invalid shuffle block path"),
            ([st.path], [-1], [5], "Invalid shuffle block range"),
            ([st.path], [0], ["5"], "Invalid shuffle block range"),
            ([st.path], [0, 1], [5], "do not match")):
        with pytest.raises(ValueError, match=why):
            segment_files(paths, starts, ends, inside)
    with pytest.raises(OSError, match="ends before byte"):
        read_segments([st.path + ".data"], [0], [10 ** 15])


def test_tracker_moves_every_output_of_a_migrated_file_and_keeps_inline_ones(tmp_path):
    t = MapOutputTracker()
    t.register_shuffle(7, 3)
    a = MapStatus("1", "h1", "/w1/shuffle_7_100_5", 10, 1, "h1:1")
    b = MapStatus("1", "h1", "/w1/shuffle_7_100_5", 10, 1, "h1:1")
    inline = MapStatus("1", "h1", "", 3, 1, "h1:1", data=b"abc")
    for i, st in enumerate((a, b, inline)):
        t.register_map_output(7, i, st)
    assert t.output_files(7) == {"/w1/shuffle_7_100_5.data"}
    assert t.move_output_file("shuffle_7_100_5.data", "2", "h2", "/w2/shuffle_7_100_5",
                              "h2:2", "Executor") == 2
    assert [(st.executor_id, st.path, st.address) for st in t.statuses(7)[:2]] == [
        ("2", "/w2/shuffle_7_100_5", "h2:2")] * 2
    assert t.move_output_file("shuffle_7_999_5.data", "2", "h2", "/x", "h2:2", "E") == 0
    assert t.remove_outputs_on_executor("1") == 0       # only the inline output was there
    assert t.remove_outputs_on_executor("2") == 2 and t.missing(7) == [0, 1]
    assert t.executors_with_outputs() == set()
    t.unregister_shuffle(7)                 # removed while a late map task still reports
    t.register_map_output(7, 0, a)
    assert not t.contains(7) and t.output_files(7) == set()


def test_migration_takes_only_map_output_files_and_never_overwrites(tmp_path):
    from ember.deploy.messages import PutMigratedBlock
    from ember.executor.decommission import migrated_block_path, store_migrated_chunk
    st = _write(tmp_path, [(1, "y" * 3000)], 4)
    name = os.path.basename(st.path) + ".data"
    assert migrated_block_path(str(tmp_path), name) == st.path + ".data"
    for bad in ("shuffle_7_0_0.index", "../shuffle_7_1_2.data", "shuffle_7_1.data", "x.data"):
        with pytest.raises(ValueError, match="Invalid migrated block id"):
            migrated_block_path(str(tmp_path), bad)
    with pytest.raises(FileExistsError):       # a peer's file of the same name stays intact
        store_migrated_chunk(None, st.path + ".data", PutMigratedBlock(name, 0, b"z", True))
    assert _read([st], 1) == [(1, "y" * 3000)]


def test_an_output_file_changed_by_another_hand_is_never_appended_to_again(tmp_path):
    """The outputs a truncated or removed file held read short or not at all (a fetch
    failure naming their map, so the driver recomputes them), never a later output's bytes:
    appended at the truncated end, the next output of the same size sat exactly where the
    lost one's status pointed, and a reducer read its records as the lost map's."""
    def records(m):
        return [(i % 10, (m, i)) for i in range(500)]

    def expected(maps, r):
        return [(r, (m, i)) for m in maps for i in range(500) if i % 10 == r]

    a, b = _write(tmp_path, records(0), 10, 0), _write(tmp_path, records(1), 10, 1)
    assert a.path == b.path
    os.truncate(a.path + ".data", a.bytes_written)          # b's bytes gone
    c = _write(tmp_path, records(2), 10, 2)
    assert c.bytes_written == b.bytes_written
    with pytest.raises(FetchFailedError) as e:
        _read([a, b, c], 3)
    assert e.value.map_index == 1
    assert c.path != a.path and _read([a, c], 3) == expected([0, 2], 3)
    os.unlink(c.path + ".data")
    d = _write(tmp_path, records(3), 10, 3)
    assert d.path not in (a.path, c.path)
    with pytest.raises(FetchFailedError) as e:
        _read([a, c, d], 3)
    assert e.value.map_index == 1
    assert _read([a, d], 3) == expected([0, 3], 3)
