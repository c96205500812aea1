"""Range reads of S3 objects as plain HTTP GETs streamed into the caller's buffer.

Why not s3fs here: a text split is one large range request, and through s3fs/aiobotocore
it costs about 1.4 s of CPU per GB in the task process (an event loop on a thread, the
body gathered in small pieces and joined) and imports botocore into every task process.
`http.client` with `readinto` lets the kernel copy the body straight into a reused buffer
(about 0.15 s per GB). Listings, writes and whole-file reads stay on s3fs.

The request is the one S3A sends: the endpoint and addressing style from S3A's keys
(`fs.s3a.endpoint`, `.connection.ssl.enabled`, `.path.style.access`), AWS's regional
endpoint without one, signed with Signature V4 when keys are given (Spark's keys, else
AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN]) and unsigned for the
Anonymous credentials provider. Credentials found only by botocore's own chain (profiles,
instance roles) or a proxy in the environment keep the s3fs road (`reader` returns None).
Keys and signatures never appear in a message: errors name the `s3a://` URL only.
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import os
import ssl
import time
import urllib.request
from typing import Iterator
from urllib.parse import quote, urlsplit

from ember import fs

_ATTEMPTS = 4               # a dropped connection or a 5xx is retried from where it stopped
_RETRY_PAUSE = 0.2
_TIMEOUT = 60.0
_REGIONS: dict[str, str] = {}       # bucket -> region S3 told us (x-amz-bucket-region)
_IDLE: dict[tuple, list] = {}      # keep-alive connections by (https, host, port)
os.register_at_fork(after_in_child=_IDLE.clear)     # a child must not share the sockets


class S3RangeReader:
    """GETs of byte ranges of one object."""

    def __init__(self, url: str, bucket: str, key: str, settings: fs.S3Settings,
                 creds: tuple[str, str, str | None] | None) -> None:
        self.url, self.bucket, self.key = url, bucket, key
        self._settings, self._creds = settings, creds
        self.size: int | None = None       # from the first response's Content-Range

    def stream(self, start: int, stop: int, buffer: bytearray) -> Iterator[int]:
        """Fill `buffer` with bytes [start, stop) (stop clipped at the object's end) piece
        by piece, yielding how many bytes each piece put at the front of `buffer`: the
        previous piece is overwritten by the next."""
        view = memoryview(buffer)
        attempt = 0
        while start < stop:
            conn, resp = self._get(start, stop - 1)
            if resp.status == 416:               # start at or past the end
                resp.read()
                _release(conn, resp.isclosed() and not resp.will_close)
                return
            if resp.status == 200 and start == 0:     # a server that sends the whole object
                total = resp.getheader("Content-Length") or ""
            elif resp.status != 206:
                _release(conn, False)
                raise OSError(f"Range request for {self.url} got HTTP {resp.status}")
            else:
                total = (resp.getheader("Content-Range") or "").rpartition("/")[2]
            if total.isdigit():
                self.size = int(total)
                stop = min(stop, self.size)
            clean = False
            try:
                while start < stop:
                    n = resp.readinto(view[:min(len(view), stop - start)])
                    if not n:
                        raise http.client.IncompleteRead(b"", stop - start)
                    start += n
                    attempt = 0
                    yield n
                clean = resp.isclosed() and not resp.will_close
            except (OSError, http.client.HTTPException):
                attempt += 1                     # resume at `start` on a new connection
                if attempt >= _ATTEMPTS:
                    raise OSError(f"Reading {self.url} failed after {_ATTEMPTS} attempts") \
                        from None
                time.sleep(_RETRY_PAUSE * attempt)
            finally:
                _release(conn, clean)

    def _get(self, first: int, last: int) -> tuple:
        """A sent request and its response headers (retrying connection failures, 5xx and
        a region S3 corrects)."""
        attempt = 0
        while attempt < _ATTEMPTS:
            https, host, port, path = self._target()
            conn, reused = _acquire(https, host, port)
            try:
                conn.request("GET", path, headers=self._headers(host, port, path, first, last))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException):
                conn.close()
                if reused:                       # the server closed an idle connection
                    continue
                attempt += 1
                if attempt == _ATTEMPTS:
                    raise OSError(f"Cannot reach the S3 endpoint for {self.url}") from None
                time.sleep(_RETRY_PAUSE * attempt)
                continue
            attempt += 1
            region = resp.getheader("x-amz-bucket-region")
            if resp.status in (301, 400) and region and region != self._region():
                resp.read()
                _release(conn, not resp.will_close)
                _REGIONS[self.bucket] = region
                continue
            if resp.status == 404:
                resp.read()
                _release(conn, not resp.will_close)
                raise FileNotFoundError(f"No such file: {self.url}")
            if resp.status in (403, 401):
                resp.read()
                _release(conn, not resp.will_close)
                raise PermissionError(f"Access denied reading {self.url} (HTTP {resp.status})")
            if resp.status >= 500 and attempt < _ATTEMPTS:
                resp.read()
                _release(conn, not resp.will_close)
                time.sleep(_RETRY_PAUSE * attempt)
                continue
            return conn, resp
        raise OSError(f"Range request for {self.url} failed")

    def _region(self) -> str:
        return (_REGIONS.get(self.bucket) or self._settings.region
                or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                or "us-east-1")

    def _target(self) -> tuple[bool, str, int, str]:
        """(https, host, port, path) of the object: the endpoint S3A's keys give, else
        AWS's regional one; path style when asked (or a dotted bucket on AWS, whose
        virtual host would not match the certificate)."""
        endpoint = self._settings.endpoint
        if endpoint:
            parts = urlsplit(endpoint)
            https, host = parts.scheme == "https", parts.hostname or ""
            port = parts.port or (443 if https else 80)
            base = parts.path.rstrip("/")
            path_style = self._settings.path_style
        else:
            https, host, port, base = True, f"s3.{self._region()}.amazonaws.com", 443, ""
            path_style = self._settings.path_style or "." in self.bucket
        key = quote(self.key, safe="/-_.~")
        if path_style:
            return https, host, port, f"{base}/{quote(self.bucket, safe='')}/{key}"
        return https, f"{self.bucket}.{host}", port, f"{base}/{key}"

    def _headers(self, host: str, port: int, path: str, first: int, last: int) -> dict:
        default_port = port in (80, 443)
        headers = {"Host": host if default_port else f"{host}:{port}",
                   "Range": f"bytes={first}-{last}"}
        if self._creds:
            headers.update(sigv4_headers(self._creds, self._region(), headers["Host"], path))
        return headers


def reader(url: str) -> S3RangeReader | None:
    """A direct reader for an `s3://`/`s3a://` URL, or None where s3fs must do it (see the
    module's docstring)."""
    if fs.scheme(url) not in ("s3", "s3a"):
        return None
    parts = urlsplit(url)
    bucket, key = parts.netloc, parts.path.lstrip("/")
    if not bucket or not key:
        return None
    settings = fs.s3_settings(bucket)
    creds: tuple[str, str, str | None] | None
    if settings.key and settings.secret:
        creds = (settings.key, settings.secret, settings.token)
    elif settings.anonymous:
        creds = None
    elif os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        creds = (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                 os.environ.get("AWS_SESSION_TOKEN") or None)
    else:
        return None
    r = S3RangeReader(url, bucket, key, settings, creds)
    _, host, _, _ = r._target()
    if urllib.request.getproxies() and not urllib.request.proxy_bypass(host):
        return None
    return r


def sigv4_headers(creds: tuple[str, str, str | None], region: str, host: str, path: str,
                  now: datetime.datetime | None = None) -> dict[str, str]:
    """AWS Signature V4 headers of a GET without a body or query (S3's UNSIGNED-PAYLOAD);
    `path` is already URI-encoded."""
    key_id, secret, token = creds
    now = now or datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": host, "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
               "x-amz-date": amz_date}
    if token:
        headers["x-amz-security-token"] = token
    signed = ";".join(sorted(headers))
    canonical = "\n".join(["GET", path, "", *(f"{k}:{headers[k]}" for k in sorted(headers)),
                           "", signed, "UNSIGNED-PAYLOAD"])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {"x-amz-content-sha256": "UNSIGNED-PAYLOAD", "x-amz-date": amz_date,
           "Authorization": f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, "
                            f"SignedHeaders={signed}, Signature={signature}"}
    if token:
        out["x-amz-security-token"] = token
    return out


def _acquire(https: bool, host: str, port: int) -> tuple[http.client.HTTPConnection, bool]:
    """(a connection, whether it is a kept-alive one)."""
    try:
        return _IDLE.get((https, host, port), []).pop(), True
    except IndexError:
        pass
    if https:
        return http.client.HTTPSConnection(host, port, timeout=_TIMEOUT,
                                           context=ssl.create_default_context()), False
    return http.client.HTTPConnection(host, port, timeout=_TIMEOUT), False


def _release(conn: http.client.HTTPConnection, reusable: bool) -> None:
    """Keep a connection whose response was read to the end; close any other."""
    if not reusable:
        conn.close()
        return
    https = isinstance(conn, http.client.HTTPSConnection)
    idle = _IDLE.setdefault((https, conn.host, conn.port), [])
    if len(idle) < 4:
        idle.append(conn)
    else:
        conn.close()
