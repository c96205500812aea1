"""ember.deploy.properties: the one reader of spark-defaults.conf and SPARK_<DAEMON>_OPTS, and
Spark's precedence for daemons (`--conf` > `-D` in the OPTS variable > properties file)."""
from __future__ import annotations

import os

import pytest

from ember.deploy.properties import (PropertiesFileError, daemon_conf, default_properties_file,
                                     opts_properties, read_properties)


def write(path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_read_properties_java_format(tmp_path):
    path = write(tmp_path / "p.conf", "\n".join([
        "# a comment",
        "! another comment",
        "   ",
        "spark.a 1",
        "spark.b=2",
        "spark.c:3",
        "  spark.d  =  four  ",
        "spark.e\t:\tfive",
        "spark.f value=with=equals",
        "spark.g",
        "spark.h = a \\",
        "    b \\",
        "  c",
        "spark.i = x\\\\",               # an escaped backslash: no continuation
        "spark.j = y",
        "# spark.k = a comment ending in a backslash is no continuation \\",
        "spark.k k",
        "other.key  kept by the reader",
        "spark.last = end \\",          # the file ends inside a continuation
    ]))
    assert read_properties(path) == {
        "spark.a": "1", "spark.b": "2", "spark.c": "3", "spark.d": "four", "spark.e": "five",
        "spark.f": "value=with=equals", "spark.g": "", "spark.h": "a b c",
        "spark.i": "x\\\\", "spark.j": "y", "spark.k": "k",
        "other.key": "kept by the reader", "spark.last": "end",
    }


def test_read_properties_crlf_and_utf8(tmp_path):
    path = tmp_path / "p.conf"
    path.write_bytes("spark.x=é\r\nspark.y=\\\r\n  z\r\n".encode("utf-8"))
    assert read_properties(str(path)) == {"spark.x": "é", "spark.y": "z"}


def test_unreadable_properties_file(tmp_path):
    missing = str(tmp_path / "nope.conf")
    with pytest.raises(PropertiesFileError) as e:
        read_properties(missing)
    assert str(e.value) == f"Properties file {missing} does not exist"
    assert isinstance(e.value, ValueError) and e.value.path == missing
    with pytest.raises(ValueError, match="is not a normal file"):
        read_properties(str(tmp_path))
    bad = tmp_path / "latin1.conf"
    bad.write_bytes(b"spark.x=\xe9\n")
    with pytest.raises(ValueError) as e:
        read_properties(str(bad))
    assert str(e.value).startswith(f"Cannot read the properties file {bad}: not UTF-8")
    assert "\n" not in str(e.value)
    if os.geteuid() != 0:
        locked = tmp_path / "locked.conf"
        locked.write_text("spark.x=1\n")
        locked.chmod(0)
        with pytest.raises(ValueError, match=r"Cannot read the properties file .*locked\.conf: "
                                             "Permission denied"):
            read_properties(str(locked))


def test_opts_properties():
    opts = "-Xmx1g -Dspark.a=1 -Dother.b=2 '-Dspark.c=x y' -Dspark.d=k=v -Dspark.e -D"
    assert opts_properties(opts, "SPARK_MASTER_OPTS") == {
        "spark.a": "1", "spark.c": "x y", "spark.d": "k=v"}
    assert opts_properties("", "SPARK_WORKER_OPTS") == {}
    assert opts_properties(None, "SPARK_WORKER_OPTS") == {}


def test_opts_properties_bad_quoting():
    with pytest.raises(ValueError) as e:
        opts_properties("-Dspark.a='unterminated", "SPARK_HISTORY_OPTS")
    assert str(e.value) == "Cannot parse SPARK_HISTORY_OPTS: No closing quotation"


def test_default_properties_file(tmp_path):
    conf_dir, home = tmp_path / "conf-dir", tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    conf_dir.mkdir()
    assert default_properties_file({}) is None
    assert default_properties_file({"SPARK_HOME": str(home)}) is None   # no file there
    home_file = write(home / "conf" / "spark-defaults.conf", "spark.a 1\n")
    assert default_properties_file({"SPARK_HOME": str(home)}) == home_file
    # SPARK_CONF_DIR wins, and without a file there SPARK_HOME/conf is not consulted (Spark)
    env = {"SPARK_HOME": str(home), "SPARK_CONF_DIR": str(conf_dir)}
    assert default_properties_file(env) is None
    dir_file = write(conf_dir / "spark-defaults.conf", "spark.a 2\n")
    assert default_properties_file(env) == dir_file


def test_daemon_conf_precedence(tmp_path):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    write(conf_dir / "spark-defaults.conf", "spark.a default\nspark.only.default yes\n")
    explicit = write(tmp_path / "explicit.conf",
                     "spark.a file\nspark.b file\nspark.c file\nnot.spark dropped\n")
    env = {"SPARK_CONF_DIR": str(conf_dir),
           "SPARK_WORKER_OPTS": "-Dspark.b=opts -Dspark.c=opts -Xmx1g",
           "SPARK_MASTER_OPTS": "-Dspark.z=other daemon"}
    # --conf > SPARK_WORKER_OPTS > --properties-file; non-spark file keys are not kept
    assert daemon_conf(env, "SPARK_WORKER_OPTS", explicit, {"spark.c": "cli"}) == {
        "spark.a": "file", "spark.b": "opts", "spark.c": "cli"}
    # without --properties-file: the default file (and only that one)
    assert daemon_conf(env, "SPARK_WORKER_OPTS", None, {}) == {
        "spark.a": "default", "spark.only.default": "yes", "spark.b": "opts",
        "spark.c": "opts"}
    assert daemon_conf({}, "SPARK_WORKER_OPTS", None, {"spark.x": "1"}) == {"spark.x": "1"}


def test_daemon_conf_errors(tmp_path):
    with pytest.raises(PropertiesFileError, match="does not exist"):
        daemon_conf({}, "SPARK_MASTER_OPTS", str(tmp_path / "missing.conf"), {})
    with pytest.raises(ValueError, match="^Cannot parse SPARK_MASTER_OPTS: "):
        daemon_conf({"SPARK_MASTER_OPTS": '-Dspark.a="x'}, "SPARK_MASTER_OPTS", None, {})


# ----------------------------------------------------------------- the CLIs that use it

def test_master_and_worker_cli_errors_keep_their_texts(tmp_path):
    from ember.deploy.master import cli as master_cli
    from ember.deploy.worker import cli as worker_cli
    missing = str(tmp_path / "missing.conf")
    with pytest.raises(master_cli.MasterCliError) as e:
        master_cli.parse_args(["--properties-file", missing], {})
    assert str(e.value) == f"Cannot read the properties file {missing}: No such file or directory"
    with pytest.raises(worker_cli.CliError) as e:
        worker_cli.parse_args(["--properties-file", missing, "-h", "h", "spark://m:1"], {})
    assert str(e.value) == f"Properties file {missing} does not exist"
    with pytest.raises(master_cli.MasterCliError, match="^Cannot parse SPARK_MASTER_OPTS: "):
        master_cli.parse_args([], {"SPARK_MASTER_OPTS": "'"})
    with pytest.raises(worker_cli.CliError, match="^Cannot parse SPARK_WORKER_OPTS: "):
        worker_cli.parse_args(["-h", "h", "spark://m:1"], {"SPARK_WORKER_OPTS": "'"})


def test_master_reads_continuation_lines_and_default_file(tmp_path):
    from ember.deploy.master import cli as master_cli
    write(tmp_path / "spark-defaults.conf", "spark.worker.timeout \\\n   30\nx.y 1\n")
    a = master_cli.parse_args(["-h", "h"], {"SPARK_CONF_DIR": str(tmp_path),
                                            "SPARK_MASTER_OPTS": "-Dspark.master.ui.port=9090"})
    assert a.conf == {"spark.worker.timeout": "30", "spark.master.ui.port": "9090"}
    assert a.webui_port == 9090


def test_submit_ignores_non_spark_properties_with_a_warning(tmp_path, capsys):
    from ember import cli
    path = write(tmp_path / "p.conf", "spark.app.name = from file\nfoo.bar 1\n"
                                      "spark.executor.memory: 2g\n")
    args = cli.submit_parser().parse_args(["--properties-file", path, "--conf",
                                           "spark.app.name=cli", "app.py"])
    conf = cli.build_conf(args)
    assert conf["spark.app.name"] == "cli" and conf["spark.executor.memory"] == "2g"
    assert "foo.bar" not in conf
    assert "Warning: Ignoring non-Spark config property: foo.bar" in capsys.readouterr().err
    args = cli.submit_parser().parse_args(["--properties-file", str(tmp_path / "no"), "a.py"])
    with pytest.raises(cli.CliError, match="Properties file .* does not exist"):
        cli.build_conf(args)


def test_submit_reads_the_default_spark_defaults_conf(tmp_path, monkeypatch):
    """Without --properties-file, spark-submit loads $SPARK_CONF_DIR/spark-defaults.conf."""
    from ember import cli
    (tmp_path / "spark-defaults.conf").write_text("spark.executor.memory 3g\n"
                                                  "spark.app.name from-defaults\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    conf = cli.build_conf(cli.submit_parser().parse_args(["--name", "flag", "app.py"]))
    assert (conf["spark.executor.memory"], conf["spark.app.name"]) == ("3g", "flag")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "elsewhere"))
    conf = cli.build_conf(cli.submit_parser().parse_args(["app.py"]))
    assert "spark.executor.memory" not in conf
