"""Hadoop's SequenceFile and text formats (ember.hadoop_io) through PySpark's API:
sequenceFile / hadoopFile / newAPIHadoopFile / hadoopRDD / newAPIHadoopRDD and the
saveAsSequenceFile / saveAsHadoopFile / saveAsNewAPIHadoopFile / *Dataset family, plus
pickle files in PySpark's format. Spark itself reading these files (and Ember reading
Spark's) is in test_spark_interop.py.
"""
from __future__ import annotations

import io
import math
import pickle

import pytest

from ember import hadoop_io as hio
from ember.errors import SparkException
from ember.rdd_sources import FileSplit

pytestmark = pytest.mark.timeout(120)

SEQ_OUT = "org.apache.hadoop.mapred.SequenceFileOutputFormat"
NEW_SEQ_OUT = "org.apache.hadoop.mapreduce.lib.output.SequenceFileOutputFormat"
NEW_SEQ_IN = "org.apache.hadoop.mapreduce.lib.input.SequenceFileInputFormat"
TEXT_IN = "org.apache.hadoop.mapred.TextInputFormat"
KV_IN = "org.apache.hadoop.mapreduce.lib.input.KeyValueTextInputFormat"
INT, TEXT = "org.apache.hadoop.io.IntWritable", "org.apache.hadoop.io.Text"


def test_vlongs_and_writables_round_trip():
    for value in (0, 127, -112, -113, 128, -129, 3000, 2 ** 40, -(2 ** 63), 2 ** 63 - 1):
        out = bytearray()
        hio.write_vlong(out, value)
        assert hio.read_vlong(bytes(out), 0) == (value, len(out))
    samples = {hio.INT: -5, hio.LONG: 2 ** 40, hio.DOUBLE: 2.5, hio.TEXT: "héllo",
               hio.BOOLEAN: True, hio.BYTES: bytearray(b"\x00\xff"), hio.NULL: None,
               hio.VINT: -300, hio.MAP: {1: "a", "b": {2.5: None, "c": b"x"}, False: 7}}
    for cls, value in samples.items():
        out = bytearray()
        hio.ENCODERS[cls](out, value)
        decoded, end = hio.decoder(cls)(bytes(out), 0)
        assert end == len(out)
        if cls == hio.MAP:
            assert decoded == {1: "a", "b": {2.5: None, "c": bytearray(b"x")}, False: 7}
        else:
            assert decoded == value
    assert [hio.writable_class(v) for v in (1, 2 ** 40, 1.0, "s", b"b", None, {}, False)] == [
        hio.INT, hio.LONG, hio.DOUBLE, hio.TEXT, hio.BYTES, hio.NULL, hio.MAP, hio.BOOLEAN]
    with pytest.raises(SparkException, match="Data of type list cannot be used"):
        hio.writable_class([1])


def test_text_output_prints_what_javas_writables_print():
    assert hio.text_line(1, "a") == b"1\ta\n"
    assert hio.text_line(None, 2.5e10) == b"2.5E10\n"
    assert hio.text_line(3, None) == b"3\n" and hio.text_line(None, None) is None
    assert hio.text_line(4, True) == b"4\ttrue\n"
    assert hio.text_line(5, b"ab") == b"5\t61 62\n"
    assert hio.text_line(6, {"a": 1}) == b"6\t{a=1}\n"
    assert [hio.java_string(d) for d in (1.0, 1e7, 1e-4, 0.001, -2.5e-10, 1e16)] == [
        "1.0", "1.0E7", "1.0E-4", "0.001", "-2.5E-10", "1.0E16"]


@pytest.mark.parametrize("compression,codec", [
    ("NONE", None), ("RECORD", hio.DEFAULT_CODEC), ("BLOCK", hio.DEFAULT_CODEC),
    ("BLOCK", "org.apache.hadoop.io.compress.GzipCodec")])
def test_a_sequence_file_read_in_any_splits_gives_each_record_once(compression, codec,
                                                                     monkeypatch):
    """Splits own the records after the sync markers that start in them, so any cut of a
    file reads every record exactly once (small sync intervals and blocks here)."""
    monkeypatch.setattr(hio, "SYNC_INTERVAL", 300)
    monkeypatch.setattr(hio, "BLOCK_SIZE", 500)
    records = [(i, "v" * (i % 17)) for i in range(3000)]
    out = io.BytesIO()
    writer = hio.SequenceFileWriter(out, hio.INT, hio.TEXT, compression, codec)
    for k, v in records:
        writer.append(k, v)
    writer.close()
    data = out.getvalue()
    assert data.count(writer.sync) > 20
    for cut in (1, 2, 3, 7, 50, 400):
        step = len(data) // cut + 1
        got = []
        for start in range(0, len(data), step):
            got += hio.read_sequence_file(io.BytesIO(data), start, min(start + step, len(data)))
        assert got == records, (compression, cut)


def test_text_lines_split_as_hadoops_line_reader():
    """A split reads the lines that start at or before its end, after skipping the line it
    starts inside of (the previous split's): any cut reads each line once."""
    text = b"".join(b"line %d\n" % i for i in range(500)) + b"last\r\n"
    lines = text.splitlines()
    for cut in (1, 3, 17, 200):
        step = len(text) // cut + 1
        got = []
        for start in range(0, len(text), step):
            got += hio.read_text_lines(io.BytesIO(text), start, min(start + step, len(text)))
        assert [line for _, line in got] == lines
        assert all(text[offset:offset + len(line)] == line for offset, line in got)


def test_sequence_files_through_pysparks_api(sc, tmp_path):
    d = str(tmp_path)
    pairs = [(1, ""), (1, "a"), (3, "x")]
    sc.parallelize(pairs, 2).saveAsSequenceFile(d + "/seq")
    assert sorted(sc.sequenceFile(d + "/seq").collect()) == pairs
    assert sorted((tmp_path / "seq").iterdir())[-1].name == "part-00001"
    maps = [(1, {3.0: "bb"}), (2, {1.0: "aa", "n": None, "m": {"x": True}})]
    sc.parallelize(maps).saveAsNewAPIHadoopFile(d + "/maps", NEW_SEQ_OUT)
    assert sorted(sc.sequenceFile(d + "/maps").collect()) == maps
    assert any(p.name.startswith("part-r-") for p in (tmp_path / "maps").iterdir())
    sc.parallelize(pairs).saveAsNewAPIHadoopFile(d + "/typed", NEW_SEQ_OUT, INT, TEXT)
    assert sorted(sc.newAPIHadoopFile(d + "/typed", NEW_SEQ_IN, INT, TEXT).collect()) == pairs
    many = [(i, f"v{i}") for i in range(20000)]
    for codec in (hio.DEFAULT_CODEC, "org.apache.hadoop.io.compress.GzipCodec"):
        path = f"{d}/{codec.rsplit('.', 1)[-1]}"
        sc.parallelize(many, 3).saveAsSequenceFile(path, codec)
        assert sorted(sc.sequenceFile(path, minSplits=5).collect()) == many
    conf = {"mapreduce.output.fileoutputformat.outputdir": d + "/dataset",
            "mapreduce.job.outputformat.class": NEW_SEQ_OUT,
            "mapreduce.job.output.key.class": INT, "mapreduce.job.output.value.class": TEXT,
            "mapreduce.output.fileoutputformat.compress": "true",
            "mapreduce.output.fileoutputformat.compress.type": "RECORD"}
    sc.parallelize(pairs).saveAsNewAPIHadoopDataset(conf)
    read_conf = {"mapreduce.input.fileinputformat.inputdir": d + "/dataset"}
    assert sorted(sc.newAPIHadoopRDD(NEW_SEQ_IN, INT, TEXT, conf=read_conf).collect()) == pairs
    old_conf = {"mapred.output.format.class": SEQ_OUT, "mapred.output.dir": d + "/old",
                "mapreduce.job.output.key.class": "org.apache.hadoop.io.LongWritable",
                "mapreduce.job.output.value.class": "org.apache.hadoop.io.DoubleWritable"}
    sc.parallelize([(1, 2), (2 ** 40, 0.5)]).saveAsHadoopDataset(old_conf)
    assert sorted(sc.hadoopRDD("org.apache.hadoop.mapred.SequenceFileInputFormat",
                               INT, TEXT, conf={"mapred.input.dir": d + "/old"}).collect()) == [
        (1, 2.0), (2 ** 40, 0.5)]


def test_text_formats_through_pysparks_api(sc, tmp_path):
    d = str(tmp_path)
    sc.parallelize([(1, "a"), (None, "b"), (2.5e10, None), (3, "")], 1).saveAsHadoopFile(
        d + "/text", "org.apache.hadoop.mapred.TextOutputFormat")
    assert sc.textFile(d + "/text").collect() == ["1\ta", "b", "2.5E10", "3\t"]
    lines = sc.hadoopFile(d + "/text", TEXT_IN, "org.apache.hadoop.io.LongWritable",
                          TEXT).collect()
    assert lines == [(0, "1\ta"), (4, "b"), (6, "2.5E10"), (13, "3\t")]
    assert sc.newAPIHadoopFile(d + "/text", KV_IN, TEXT, TEXT).collect() == [
        ("1", "a"), ("b", ""), ("2.5E10", ""), ("3", "")]
    conf = {"mapreduce.input.keyvaluelinerecordreader.key.value.separator": "E"}
    assert sc.newAPIHadoopFile(d + "/text", KV_IN, TEXT, TEXT, conf=conf).collect()[2] == (
        "2.5", "10")
    big = [f"{i}\t{'x' * (i % 40)}" for i in range(20000)]
    sc.parallelize(big, 1).saveAsTextFile(d + "/big")
    kv = sc.newAPIHadoopRDD(KV_IN, TEXT, TEXT, conf={
        "mapreduce.input.fileinputformat.inputdir": d + "/big"})
    assert kv.collect() == [tuple(line.split("\t")) for line in big]


def test_pickle_files_are_pysparks_format_and_old_ones_still_read(sc, tmp_path):
    data = list(range(1000)) + ["s", {"d": (1, 2)}, None, 2.5]
    sc.parallelize(data, 3).saveAsPickleFile(str(tmp_path / "p"), 7)
    part = (tmp_path / "p" / "part-00000").read_bytes()
    assert part.startswith(b"SEQ\x06!org.apache.hadoop.io.NullWritable")
    assert sc.pickleFile(str(tmp_path / "p")).collect() == data
    chunks = [pickle.dumps([1, 2]), pickle.dumps([3])]
    assert hio.from_java_byte_arrays(hio.java_byte_arrays(chunks)) == chunks
    old = tmp_path / "old"
    old.mkdir()
    with open(old / "part-00000", "wb") as f:              # what Ember wrote before
        pickle.dump([1, 2], f)
        pickle.dump([3], f)
    assert sc.pickleFile(str(old)).collect() == [1, 2, 3]


def test_what_ember_cannot_do_is_a_clear_error_before_any_task(sc, tmp_path):
    d = str(tmp_path)
    rdd = sc.parallelize([(1, "a")])
    with pytest.raises(SparkException, match="no output format 'org.example.Fmt'"):
        rdd.saveAsHadoopFile(d + "/a", "org.example.Fmt")
    with pytest.raises(SparkException, match="Compression codec .*Lz4Codec not found"):
        rdd.saveAsSequenceFile(d + "/b", "org.apache.hadoop.io.compress.Lz4Codec")
    with pytest.raises(SparkException, match="Ember has no JVM"):
        rdd.saveAsHadoopFile(d + "/c", SEQ_OUT, keyConverter="org.example.Conv")
    with pytest.raises(SparkException, match="no input format"):
        sc.hadoopFile(d, "org.example.In", INT, TEXT)
    with pytest.raises(SparkException, match="No input paths specified"):
        sc.hadoopRDD(TEXT_IN, INT, TEXT, conf={})
    with pytest.raises(SparkException, match="empty collection"):
        sc.parallelize([], 1).saveAsSequenceFile(d + "/e")
    with pytest.raises(SparkException, match="wrong key class: .*Text is not class .*Int"):
        sc.parallelize([("x", "y")]).saveAsNewAPIHadoopFile(d + "/f", NEW_SEQ_OUT, INT, TEXT)
    with pytest.raises(SparkException, match="is not an org.apache.hadoop.mapred.Output"):
        rdd.saveAsHadoopFile(d + "/h", NEW_SEQ_OUT)               # new API to the old
    with pytest.raises(SparkException, match="takes the new API's formats"):
        rdd.saveAsNewAPIHadoopFile(d + "/i", SEQ_OUT)
    with pytest.raises(SparkException, match="takes the new API's formats"):
        sc.newAPIHadoopFile(d, TEXT_IN, INT, TEXT)
    with pytest.raises(SparkException, match="takes the old API's formats"):
        sc.hadoopRDD(KV_IN, TEXT, TEXT, conf={"mapred.input.dir": d})
    with pytest.raises(SparkException, match="RDD element of type list cannot be used"):
        sc.parallelize([[(1, "a")], [2, "b"]], 2).saveAsSequenceFile(d + "/j")
    with pytest.raises(SparkException, match="RDD element of type int cannot be used"):
        sc.parallelize([1, 2]).saveAsHadoopFile(d + "/g",
                                                "org.apache.hadoop.mapred.TextOutputFormat")
    assert not (tmp_path / "f" / "_SUCCESS").exists()
    assert sc.parallelize(range(3)).count() == 3


def test_a_split_of_a_sequence_file_is_a_file_split(sc, tmp_path):
    sc.parallelize([(i, "x" * 30) for i in range(30000)], 1).saveAsSequenceFile(
        str(tmp_path / "s"))
    rdd = sc.sequenceFile(str(tmp_path / "s"), minSplits=6)
    splits = rdd._get_partitions()
    assert len(splits) >= 6 and all(isinstance(s, FileSplit) for s in splits)
    sizes = rdd.glom().map(len).collect()
    assert sum(sizes) == 30000 and sum(1 for n in sizes if n) >= 5


def test_a_corrupt_sequence_file_fails_its_job_naming_the_file(sc, tmp_path):
    sc.parallelize([(i, f"v{i}") for i in range(3000)], 1).saveAsSequenceFile(
        str(tmp_path / "good"))
    good = (tmp_path / "good" / "part-00000").read_bytes()
    for name, data, message in (("cut", good[:len(good) // 2], "is a corrupt SequenceFile"),
                                ("head", good[:60], "is a corrupt SequenceFile"),
                                ("junk", b"\x00" * 500, "is not a SequenceFile")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "part-00000").write_bytes(data)
        with pytest.raises(SparkException) as info:
            sc.sequenceFile(str(tmp_path / name), minSplits=2).count()
        assert f"{tmp_path / name / 'part-00000'} {message}" in str(info.value)
    assert sc.sequenceFile(str(tmp_path / "good")).count() == 3000


def test_a_header_with_much_metadata_and_a_streamed_file(tmp_path):
    """The header is read exactly, however long its metadata (Hadoop writers may add
    kilobytes of it), and the records follow without a seek (an http file is a stream)."""
    header = bytearray(b"SEQ\x06")
    hio._encode_text(header, hio.TEXT)
    hio._encode_text(header, hio.TEXT)
    header += b"\x00\x00" + hio._INT.pack(2)
    for text in ("a", "x" * 5000, "b", "y" * 300):
        hio._encode_text(header, text)
    sync = b"0123456789abcdef"
    body = bytearray()
    for k, v in (("k1", "v1"), ("k2", "v2")):
        key, value = bytearray(), bytearray()
        hio._encode_text(key, k)
        hio._encode_text(value, v)
        body += hio._INT.pack(len(key) + len(value)) + hio._INT.pack(len(key)) + key + value

    class Stream(io.RawIOBase):         # reads forward only, as fsspec's HTTPStreamFile
        def __init__(self, data):
            self._data = io.BytesIO(data)

        def readable(self):
            return True

        def readinto(self, b):
            return self._data.readinto(b)

        def seek(self, *a):
            raise ValueError("Cannot seek streaming HTTP file")

    data = bytes(header + sync + body)
    assert list(hio.read_sequence_file(Stream(data), 0, math.inf)) == [("k1", "v1"),
                                                                       ("k2", "v2")]
    with pytest.raises(ValueError, match="ends inside its header"):
        list(hio.read_sequence_file(io.BytesIO(data[:3000]), 0, math.inf))
