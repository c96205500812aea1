"""The one configuration registry (ember/config.py), its reference page and the refusal of
unimplemented safety keys; the units parsers every reader goes through (ember/util/units.py).
"""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from ember import config
from ember.config import REGISTRY
from ember.util.units import (bytes_to_string, megabytes_to_string, parse_duration,
                              parse_size)

ROOT = pathlib.Path(__file__).resolve().parent.parent
_LITERAL = re.compile(r"""(?<![A-Za-z0-9_])[rbu]?["'](spark\.[A-Za-z0-9_.]+)["']""")
_FSTRING_HEAD = re.compile(r"""f["'](spark\.[A-Za-z0-9_.]*)\{""")


def _sources() -> list[pathlib.Path]:
    return sorted(p for p in (ROOT / "ember").rglob("*.py"))


def _namespace_of_declared(literal: str) -> bool:
    """`spark.rpc.` (a filter on keys) or `spark.driver` (a resource component name): the
    namespace of declared keys, not a key read by itself."""
    head = literal if literal.endswith(".") else literal + "."
    return any(k.startswith(head) for k in (*REGISTRY, *config.PREFIXES))


# ---------------------------------------------------------------------------------------------
# Every key read is declared
# ---------------------------------------------------------------------------------------------

def _undeclared(paths: list[pathlib.Path]) -> list[str]:
    found = []
    for path in paths:
        text = path.read_text()
        where = path.relative_to(ROOT) if ROOT in path.parents else path.name
        for m in _LITERAL.finditer(text):
            key = m.group(1)
            if not (config.declared(key) or _namespace_of_declared(key)):
                found.append(f"{where}:{text.count(chr(10), 0, m.start()) + 1}: {key}")
        for m in _FSTRING_HEAD.finditer(text):   # f"spark.ssl.{ns}.enabled" -> spark.ssl.
            head = m.group(1)
            if head and not (head in config.PREFIXES or _namespace_of_declared(head)):
                found.append(f"{where}:{text.count(chr(10), 0, m.start()) + 1}: {head}*")
    return found


def test_every_spark_key_literal_in_ember_is_declared():
    undeclared = _undeclared(_sources())
    assert not undeclared, ("spark.* keys read but not declared in ember/config.py:\n"
                            + "\n".join(undeclared))


def test_the_scan_reports_an_undeclared_key(tmp_path):
    """The check above is not vacuous: a made-up key, plain or in an f-string, is reported."""
    src = tmp_path / "reader.py"
    src.write_text('a = conf.get("spark.ember.noSuchKey")\n'
                   'b = conf.get(f"spark.nosuchfamily.{name}")\n'
                   'c = conf.get("spark.port.maxRetries")\n')
    assert _undeclared([src]) == ["reader.py:1: spark.ember.noSuchKey",
                                  "reader.py:2: spark.nosuchfamily.*"]


def test_no_reader_supplies_its_own_default_for_a_declared_key():
    """`conf.get("spark.x", "default")` outside the registry is a second default that can
    drift from the registry's (as spark.port.maxRetries' did); local properties of jobs are
    not configuration and may be read with one."""
    offenders = []
    pattern = re.compile(r"""\.get\(\s*["'](spark\.[A-Za-z0-9_.]+)["']\s*,""")
    for path in _sources():
        if path == ROOT / "ember" / "config.py":
            continue
        text = path.read_text()
        for m in pattern.finditer(text):
            entry = REGISTRY.get(m.group(1))
            if entry is not None and entry.read_by != (config.JOB,):
                line = text.count("\n", 0, m.start()) + 1
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {m.group(1)}")
    assert not offenders, "read through ember.config.read instead:\n" + "\n".join(offenders)


def test_entries_are_complete():
    for e in (*REGISTRY.values(), *config.PREFIXES.values()):
        assert e.key.startswith("spark."), e.key
        assert e.doc and "\n" not in e.doc, e.key
        assert e.read_by, f"{e.key} names no reader"
    with pytest.raises(ValueError, match="declared twice"):
        config._entry("spark.worker.timeout", 1, config.INT, "again")


def test_spark_defaults():
    """Spark's defaults (the reference, §1.2-1.3 and the configuration page)."""
    expected = {"spark.port.maxRetries": 16, "spark.rpc.askTimeout": 120.0,
                "spark.rpc.message.maxSize": 128, "spark.worker.timeout": 60.0,
                "spark.master.rest.enabled": True, "spark.master.rest.port": 6066,
                "spark.master.ui.port": 8080, "spark.deploy.retainedApplications": 200,
                "spark.deploy.spreadOutApps": True, "spark.worker.cleanup.enabled": True,
                "spark.worker.cleanup.interval": 1800.0, "spark.worker.driverTerminateTimeout":
                10.0, "spark.executor.memory": 1024, "spark.task.maxFailures": 4,
                "spark.history.ui.port": 18080, "spark.shuffle.service.port": 7337,
                "spark.scheduler.maxRegisteredResourcesWaitingTime": 30.0}
    assert {k: config.read({}, k) for k in expected} == expected


def test_an_unset_key_takes_its_fallbacks_value_as_spark_does():
    """Spark's fallbackConf: spark.rpc.askTimeout follows spark.network.timeout, each
    locality level's wait follows spark.locality.wait, unless set itself."""
    net = {"spark.network.timeout": "7s"}
    assert config.read(net, "spark.rpc.askTimeout") == 7.0
    assert config.read({**net, "spark.rpc.askTimeout": "3"}, "spark.rpc.askTimeout") == 3.0
    assert config.read(net, "spark.storage.blockManagerHeartbeatTimeoutMs") == 7.0
    assert config.read({"spark.storage.blockManagerHeartbeatTimeoutMs": "1500"},
                       "spark.storage.blockManagerHeartbeatTimeoutMs") == 1.5
    waits = {"spark.locality.wait": "1s", "spark.locality.wait.node": "0"}
    assert [config.read(waits, f"spark.locality.wait.{level}")
            for level in ("process", "node", "rack")] == [1.0, 0.0, 1.0]
    assert config.read({}, "spark.locality.wait.process") == 3.0
    # the RPC layer's ask timeout and the reference page follow it too
    from ember.rpc.config import RpcConf
    assert RpcConf.from_conf(net).ask_timeout == 7.0
    assert "| `spark.rpc.askTimeout` | (value of spark.network.timeout) |" in config.markdown()
    # and the daemons' keys that follow another (the legacy spreadOut included)
    from ember.deploy.master.config import MasterConfig
    from ember.deploy.worker.config import WorkerConf
    master = MasterConfig.from_conf({"spark.worker.timeout": "5", "spark.deploy.spreadOut":
                                     "false"})
    assert (master.recovery_timeout_ms, master.worker_lease_ms, master.spread_out_apps) == \
        (5000, 5000, False)
    assert MasterConfig.from_conf({"spark.deploy.spreadOut": "false",
                                   "spark.deploy.spreadOutApps": "true"}).spread_out_apps
    assert WorkerConf.from_conf({"spark.worker.timeout": "5"}).master_lease == 5.0
    assert config.read({"spark.dynamicAllocation.schedulerBacklogTimeout": "2s"},
                       "spark.dynamicAllocation.sustainedSchedulerBacklogTimeout") == 2.0
    # an error about a value names the key it came from
    with pytest.raises(ValueError, match="spark.network.timeout should be a duration like "
                       "120s, 500ms or 2min, but was '-5'"):
        RpcConf.from_conf({"spark.network.timeout": "-5"})
    with pytest.raises(ValueError, match="not declared before it"):
        config._entry("spark.test.fallsBackToNothing", None, config.SECONDS, "x",
                      fallback="spark.test.undeclared")


# ---------------------------------------------------------------------------------------------
# One parser per type
# ---------------------------------------------------------------------------------------------

def test_typed_reads_and_errors_name_the_key():
    assert config.read({}, "spark.port.maxRetries") == 16
    assert config.read({"spark.port.maxRetries": " 3 "}, "spark.port.maxRetries") == 3
    assert config.read({"spark.rpc.askTimeout": "2min"}, "spark.rpc.askTimeout") == 120.0
    assert config.read({"spark.worker.driverTerminateTimeout": "250"},
                       "spark.worker.driverTerminateTimeout") == 0.25   # bare number: ms
    assert config.read({"spark.executor.memory": "2g"}, "spark.executor.memory") == 2048
    assert config.read({"spark.executor.memory": "512"}, "spark.executor.memory") == 512
    assert config.read({"spark.ember.submit.maxUploadSize": "1k"},
                       "spark.ember.submit.maxUploadSize") == 1024
    assert config.read({"spark.master.rest.filters": " a, ,b "},
                       "spark.master.rest.filters") == ["a", "b"]
    with pytest.raises(ValueError, match="spark.port.maxRetries should be int, but was 'x'"):
        config.read({"spark.port.maxRetries": "x"}, "spark.port.maxRetries")
    with pytest.raises(ValueError, match="spark.rpc.askTimeout"):
        config.read({"spark.rpc.askTimeout": "soon"}, "spark.rpc.askTimeout")
    with pytest.raises(KeyError):
        config.read({}, "spark.ember.noSuchKeyAnywhere")


def test_empty_string_is_not_a_boolean_anywhere():
    """One rule for "" (it used to be false in rpc/config.py and an error in config.py)."""
    from ember.rpc.config import RpcConf, parse_bool
    with pytest.raises(ValueError, match="spark.authenticate"):
        config.read({"spark.authenticate": ""}, "spark.authenticate")
    with pytest.raises(ValueError, match="spark.authenticate"):
        RpcConf.from_conf({"spark.authenticate": ""})
    with pytest.raises(ValueError, match="spark.acls.enable should be boolean"):
        parse_bool("spark.acls.enable", "")


def test_master_worker_and_rpc_confs_are_filled_through_the_registry():
    from ember.deploy.master.config import MasterConfig
    from ember.deploy.worker.config import WorkerConf
    from ember.rpc.config import RpcConf
    conf = {"spark.port.maxRetries": "5", "spark.rpc.askTimeout": "7s",
            "spark.worker.timeout": "9"}
    assert RpcConf.from_conf(conf).port_max_retries == 5
    assert RpcConf.from_conf(conf).ask_timeout == 7.0
    w = WorkerConf.from_conf(conf)
    assert (w.port_max_retries, w.ask_timeout, w.timeout) == (5, 7.0, 9.0)
    assert MasterConfig.from_conf(conf).worker_timeout_ms == 9000
    assert RpcConf.from_conf({}).port_max_retries == WorkerConf.from_conf({}).port_max_retries \
        == REGISTRY["spark.port.maxRetries"].default


# ---------------------------------------------------------------------------------------------
# units
# ---------------------------------------------------------------------------------------------

def test_parse_size_bare_number_unit_is_the_callers():
    assert parse_size("1048576") == 1 << 20                # byteStringAsBytes
    assert parse_size("512", "m") == 512 << 20             # spark.executor.memory
    assert parse_size(" 2G ") == 2 << 30 and parse_size("3kb") == 3072
    assert parse_size("1p") == 1 << 50
    assert parse_size("1.5k", fractions=True) == 1536
    assert parse_size("-1m", signed=True) == -(1 << 20)
    assert parse_size("5 m", spaces=True) == 5 << 20


@pytest.mark.parametrize("text, message", [
    ("1.5g", "Fractional values are not supported. Input was: 1.5g"),
    ("1x", 'Invalid suffix: "x"'),
    ("", "Failed to parse byte string: "),
    ("-1m", "Failed to parse byte string: -1m"),
    ("5 m", "Failed to parse byte string: 5 m"),
    ("9223372036854775808", "Size too large"),
])
def test_parse_size_errors_are_sparks(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_size(text)


def test_parse_duration():
    assert parse_duration("10s") == 10.0 and parse_duration("100ms") == pytest.approx(0.1)
    assert parse_duration("1min") == 60.0 and parse_duration("2m") == 120.0
    assert parse_duration("1h") == 3600.0 and parse_duration("1d") == 86400.0
    assert parse_duration("250us") == pytest.approx(250e-6)
    assert parse_duration("5") == 5.0 and parse_duration("5", "ms") == 0.005
    assert parse_duration(".5s") == 0.5 and parse_duration(3) == 3.0
    with pytest.raises(ValueError, match='Invalid suffix: "y"'):
        parse_duration("3y")
    with pytest.raises(ValueError, match="Failed to parse time string"):
        parse_duration("-1s", signed=False)
    with pytest.raises(ValueError, match="Failed to parse time string"):
        parse_duration("soon")


def test_byte_formatter():
    assert bytes_to_string(100) == "100.0 B"
    assert bytes_to_string(2048) == "2.0 KiB" and bytes_to_string(2047) == "2047.0 B"
    assert megabytes_to_string(1024) == "1024.0 MiB" and megabytes_to_string(2048) == "2.0 GiB"
    assert bytes_to_string(3 << 60) == "3.0 EiB"


def test_each_size_reader_keeps_its_messages():
    from ember.deploy.master.master import TOTAL_UPLOAD_SIZE, max_upload_bytes
    from ember.deploy.rest.protocol import memory_string_to_mb
    from ember.deploy.worker import cli as worker_cli
    assert memory_string_to_mb("2048k") == 2
    assert max_upload_bytes({}) == 100 << 20 and max_upload_bytes({}, TOTAL_UPLOAD_SIZE) == 1 << 30
    assert max_upload_bytes({"spark.ember.submit.maxUploadSize": "2 mb"}) == 2 << 20
    with pytest.raises(ValueError, match="spark.ember.submit.maxUploadSize must be a size like "
                                         "100m or 512k, but was '1.5m'"):
        max_upload_bytes({"spark.ember.submit.maxUploadSize": "1.5M"})
    assert worker_cli.parse_memory_string("2 g") == 2048
    with pytest.raises(worker_cli.CliError, match="Invalid memory size 'lots'"):
        worker_cli.parse_memory_string("lots")
    with pytest.raises(ValueError, match=re.escape("Invalid memory string: 'x' (expected e.g. "
                                                   "512m, 2g)")):
        config.parse_memory_mb("x")
    assert config.parse_memory_mb("1.5g") == 1536 and config.parse_bytes("64m") == 64 << 20
    assert config.parse_time_seconds("200ms") == pytest.approx(0.2)


# ---------------------------------------------------------------------------------------------
# The reference page
# ---------------------------------------------------------------------------------------------

def test_docs_configuration_md_is_current():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == config.markdown(), (
        "docs/configuration.md is stale: python -m ember.config --markdown > "
        "docs/configuration.md")


def test_markdown_generator_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "ember.config", "--markdown"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert out == config.markdown()
    assert "| `spark.port.maxRetries` | 16 | int |" in out
    assert "| `spark.ui.filters` |" in out.split("## Spark keys Ember refuses")[1]
    assert "| `spark.executorEnv.*` |" in out


# ---------------------------------------------------------------------------------------------
# Unimplemented safety keys fail fast
# ---------------------------------------------------------------------------------------------

UNSUPPORTED = [("spark.authenticate.enableSaslEncryption", "true"),
               ("spark.ui.filters", "com.example.AuthFilter"),
               ("spark.ssl.standalone.needClientAuth", "true"),
               ("spark.ssl.rpc.enabled", "true")]


def test_check_unsupported_passes_defaults_and_names_the_key():
    config.check_unsupported({"spark.authenticate.enableSaslEncryption": "false",
                              "spark.network.crypto.enabled": "true",
                              "spark.ssl.enabled": "true", "spark.ssl.ui.needClientAuth": "no",
                              "spark.user.groups.mapping": REGISTRY[
                                  "spark.user.groups.mapping"].default})
    for key, value in UNSUPPORTED:
        with pytest.raises(ValueError) as e:
            config.check_unsupported({key: value})
        assert str(e.value).startswith(f"{key}={value} is not supported by Ember")
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("key, value", UNSUPPORTED)
def test_master_refuses_to_start(key, value, capsys):
    from ember.deploy.master import cli as master_cli
    assert master_cli.main(["--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                            "--conf", f"{key}={value}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: ") and key in err[0], err


@pytest.mark.parametrize("key, value", UNSUPPORTED)
def test_worker_refuses_to_start(key, value, capsys):
    from ember.deploy.worker import cli as worker_cli
    assert worker_cli.main(["--conf", f"{key}={value}", "spark://127.0.0.1:7077"]) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and key in lines[0], lines


@pytest.mark.parametrize("key, value", UNSUPPORTED)
def test_spark_context_refuses_to_start(key, value):
    from ember import SparkConf, SparkContext
    conf = SparkConf().setMaster("local[1]").setAppName("refused").set(key, value)
    with pytest.raises(ValueError, match=re.escape(f"{key}={value} is not supported")):
        SparkContext(conf=conf)
    sc = SparkContext(conf=SparkConf().setMaster("local[1]").setAppName("after"))
    try:   # nothing was left behind: the next context starts
        assert sc.parallelize([1, 2]).count() == 2
    finally:
        sc.stop()


def test_submit_refuses(tmp_path, capsys):
    from ember import cli
    app = tmp_path / "app.py"
    app.write_text("raise SystemExit('must not run')\n")
    assert cli.main(["submit", "--master", "local[1]", "--conf", "spark.ui.filters=x.Filter",
                     str(app)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith("Error: spark.ui.filters=x.Filter is not "
                                                  "supported"), err


def test_history_server_refuses(tmp_path, capsys):
    from ember.ui import history_server
    with pytest.raises(ValueError, match="spark.authenticate.enableSaslEncryption=true is not"):
        history_server.resolve_history_conf(
            ["--dir", str(tmp_path), "--conf", "spark.authenticate.enableSaslEncryption=true"],
            {})
    assert history_server.main(["--dir", str(tmp_path), "--port", "0", "--conf",
                                "spark.ui.filters=x.Filter"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: spark.ui.filters=x.Filter"), err
