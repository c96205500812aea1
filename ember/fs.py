"""Every path Ember reads or writes: local paths directly, any other URL through fsspec.

Why two roads: plain paths and `file:` URLs are the common case and must cost what `open`
costs, so callers test `is_local` first and keep their os-level code; everything else
(`s3://`, `s3a://`, `gs://`, `abfs://`, `http(s)://`, `hdfs://` through WebHDFS,
`memory://`) goes through `filesystem(url)`, which maps Spark's Hadoop keys
(`spark.hadoop.fs.s3a.endpoint`, `.access.key`, ...) to the fsspec backend's options. Keys
not given fall back to the backend's own defaults (the AWS environment variables, ~/.aws,
instance roles), as Hadoop's S3A credential chain does.

The keys come from the Spark configuration of the process: the driver's SparkContext, the
executors' task processes (sent by the driver) and the history server call `configure`;
code that holds a configuration of its own (the worker fetching a driver's resources)
passes it explicitly. Option values are secrets: they never appear in a message or a log
line here, and spark.redaction.regex covers their keys in the UI and event logs.

This is a bottom-layer module: it imports nothing of Ember but `ember.errors`.
"""
from __future__ import annotations

import os
import re
import shutil
from typing import Any, Mapping, NamedTuple
from urllib.parse import urlparse

from ember.errors import SparkException

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_S3A = "spark.hadoop.fs.s3a."
_HADOOP = "spark.hadoop."
# the extra that installs each scheme's backend (pip install 'ember[s3]')
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "abfs": "azure", "abfss": "azure",
           "webhdfs": "hdfs"}
WEBHDFS_PORT = 9870     # dfs.namenode.http-address's default port

_process_conf: dict[str, str] = {}


class UnsupportedFileSystemException(SparkException):
    """Hadoop's name: no file system for a URL's scheme (or its package is not installed)."""


def configure(conf: Mapping[str, str] | Any) -> None:
    """Take this process's Hadoop keys (`spark.hadoop.*`) from a Spark configuration."""
    global _process_conf
    _process_conf = hadoop_conf(conf)


def hadoop_conf(conf: Mapping[str, str] | Any) -> dict[str, str]:
    """The `spark.hadoop.*` entries of a dict or a SparkConf."""
    items = conf.getAll() if hasattr(conf, "getAll") else conf.items()
    return {k: v for k, v in items if k.startswith(_HADOOP)}


def scheme(path: str) -> str | None:
    """The URL scheme, lower-case; None for a plain path."""
    m = _SCHEME.match(path)
    if m:
        return m.group(1).lower()
    return "file" if path.startswith("file:") else None


def is_local(path: str) -> bool:
    return scheme(path) in (None, "file")


def local_path(path: str) -> str:
    """A plain path or a `file:` / `file://` / `file://localhost` URL as an absolute path."""
    if path.startswith("file:"):
        path = re.sub(r"^file:(//(localhost)?)?", "", path)
    return os.path.abspath(os.path.expanduser(path))


def filesystem(url: str, conf: Mapping[str, str] | None = None) -> tuple[Any, str]:
    """(fsspec file system, the path in it) for a non-local URL, with the options Spark's
    keys in `conf` (default: this process's, see `configure`) give."""
    proto = scheme(url)
    if proto is None or proto == "file":
        raise ValueError(f"{url} is a local path")
    conf = _process_conf if conf is None else hadoop_conf(conf)
    try:
        import fsspec
        from fsspec.registry import known_implementations
    except ImportError:
        raise UnsupportedFileSystemException(
            f'No FileSystem for scheme "{proto}": install fsspec') from None
    parsed = urlparse(url)
    if proto == "hdfs":
        return _webhdfs(parsed, conf), parsed.path or "/"
    target = "s3" if proto == "s3a" else proto
    if target not in known_implementations and target not in fsspec.available_protocols():
        raise UnsupportedFileSystemException(f'No FileSystem for scheme "{proto}"')
    try:
        # no listings cache: files appear from other processes (tasks, other jobs), and
        # Hadoop lists afresh every time
        fs = fsspec.filesystem(target, use_listings_cache=False,
                               **_options(target, parsed, conf))
    except ImportError:
        extra = _EXTRAS.get(proto)
        hint = f": pip install 'ember[{extra}]'" if extra else ""
        raise UnsupportedFileSystemException(
            f'No FileSystem for scheme "{proto}" (its fsspec package is not installed'
            f'{hint})') from None
    return fs, fs._strip_protocol(url)


def url_of(base_url: str, fs: Any, path: str) -> str:
    """The URL, in `base_url`'s scheme and authority, of `path` returned by `fs` (listings
    and globs return paths without the scheme; an `s3a://` input must list as `s3a://`)."""
    m = re.match(r"^[^:]+://[^/]*", base_url)
    prefix = m.group(0) if m else ""
    if scheme(base_url) in ("http", "https") or "://" in path:
        return path
    root = "" if scheme(base_url) == "hdfs" else fs._strip_protocol(prefix).rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        return prefix + path[len(root):]
    return prefix + ("" if path.startswith("/") else "/") + path


def open_file(path: str, mode: str = "rb", conf: Mapping[str, str] | None = None,
              **kwargs: Any) -> Any:
    """`open` for a local path, the backend's file object (kwargs: its options) for a URL."""
    if is_local(path):
        return open(local_path(path), mode)
    filesystem_, p = filesystem(path, conf)
    return filesystem_.open(p, mode, **kwargs)


def join(base: str, *names: str) -> str:
    """`base/name` for a local path or a URL."""
    if is_local(base):
        return os.path.join(base, *names)
    return "/".join((base.rstrip("/"),) + names)


def makedirs(path: str) -> None:
    if is_local(path):
        os.makedirs(local_path(path), exist_ok=True)
    else:
        filesystem_, p = filesystem(path)
        filesystem_.makedirs(p, exist_ok=True)


def remove_tree(path: str) -> None:
    """Delete a directory and everything in it (local path or URL); gone already is fine."""
    if is_local(path):
        shutil.rmtree(local_path(path), ignore_errors=True)
        return
    filesystem_, p = filesystem(path)
    try:
        filesystem_.rm(p, recursive=True)
    except FileNotFoundError:
        pass


def listdir(path: str) -> list[str]:
    """The sorted names in a directory (local path or URL); [] if it does not exist."""
    if is_local(path):
        p = local_path(path)
        return sorted(os.listdir(p)) if os.path.isdir(p) else []
    filesystem_, p = filesystem(path)
    try:
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in filesystem_.ls(p, detail=False))
    except FileNotFoundError:
        return []


def display(path: str) -> str:
    """How Spark shows a path: `file:/abs` for a local one, a URL as it is."""
    return "file:" + local_path(path) if is_local(path) else path


def _options(target: str, parsed: Any, conf: Mapping[str, str]) -> dict[str, Any]:
    if target == "s3":
        return _s3_options(conf, parsed.netloc)
    if target == "gs":
        opts: dict[str, Any] = {}
        if conf.get(_HADOOP + "fs.gs.project.id"):
            opts["project"] = conf[_HADOOP + "fs.gs.project.id"]
        keyfile = conf.get(_HADOOP + "google.cloud.auth.service.account.json.keyfile")
        if keyfile:
            opts["token"] = keyfile
        return opts
    if target in ("abfs", "abfss", "az"):
        account = (parsed.hostname or "").split(".")[0]
        for suffix in ("dfs", "blob"):
            key = conf.get(f"{_HADOOP}fs.azure.account.key.{account}.{suffix}.core.windows.net")
            if key:
                return {"account_name": account, "account_key": key}
        return {"account_name": account} if account else {}
    return {}


class S3Settings(NamedTuple):
    """What S3A's keys say for one bucket (None: not given)."""
    key: str | None
    secret: str | None
    token: str | None
    anonymous: bool
    endpoint: str | None        # with its scheme (connection.ssl.enabled picks it if absent)
    region: str | None
    path_style: bool

    def __repr__(self) -> str:            # never the keys, should it reach a log or a trace
        return (f"S3Settings(endpoint={self.endpoint!r}, region={self.region!r}, "
                f"path_style={self.path_style}, anonymous={self.anonymous}, "
                f"keys={'given' if self.key else 'not given'})")


def s3_settings(bucket: str, conf: Mapping[str, str] | None = None) -> S3Settings:
    """S3A's keys for `bucket` (per-bucket `fs.s3a.bucket.<b>.*` first, as S3A does) from
    `conf` (default: this process's)."""
    conf = _process_conf if conf is None else hadoop_conf(conf)

    def get(name: str) -> str | None:
        return conf.get(f"{_S3A}bucket.{bucket}.{name}") or conf.get(_S3A + name)
    key, secret = get("access.key"), get("secret.key")
    endpoint = get("endpoint")
    if endpoint and "://" not in endpoint:
        ssl = (get("connection.ssl.enabled") or "true").strip().lower() != "false"
        endpoint = ("https://" if ssl else "http://") + endpoint
    return S3Settings(
        key=key if key and secret else None, secret=secret if key and secret else None,
        token=get("session.token") if key and secret else None,
        anonymous="Anonymous" in (get("aws.credentials.provider") or ""),
        endpoint=endpoint or None, region=get("endpoint.region") or get("region"),
        path_style=(get("path.style.access") or "").strip().lower() == "true")


def _s3_options(conf: Mapping[str, str], bucket: str) -> dict[str, Any]:
    """S3A's keys -> s3fs options."""
    s3 = s3_settings(bucket, conf)
    opts: dict[str, Any] = {}
    if s3.key:
        opts["key"], opts["secret"] = s3.key, s3.secret
        if s3.token:
            opts["token"] = s3.token
    if s3.anonymous:
        opts["anon"] = True
    client: dict[str, Any] = {}
    if s3.endpoint:
        client["endpoint_url"] = s3.endpoint
    if s3.region:
        client["region_name"] = s3.region
    if client:
        opts["client_kwargs"] = client
    if s3.path_style:
        opts["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    return opts


def _webhdfs(parsed: Any, conf: Mapping[str, str]) -> Any:
    """`hdfs://nn:8020/p` through the name node's WebHDFS port (dfs.namenode.http-address,
    default 9870): the RPC port of the URL is Hadoop's, not HTTP."""
    import fsspec
    host, port = parsed.hostname or "localhost", WEBHDFS_PORT
    address = conf.get(_HADOOP + "dfs.namenode.http-address")
    if address:
        h, _, p = address.rpartition(":")
        host, port = (h or host), int(p)
    user = conf.get(_HADOOP + "hadoop.user.name") or os.environ.get("HADOOP_USER_NAME")
    try:
        return fsspec.filesystem("webhdfs", host=host, port=port, user=user,
                                 use_listings_cache=False)
    except ImportError:
        raise UnsupportedFileSystemException(
            'No FileSystem for scheme "hdfs" (WebHDFS needs the requests package: '
            "pip install 'ember[hdfs]')") from None
