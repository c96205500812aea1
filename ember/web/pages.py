"""Building blocks shared by Ember's web UIs: HTML pages, error handling, Prometheus text.

Why one module for all UIs (master, worker, and the driver/history UIs): every page shows
strings that come from users or remote peers - application names, driver main classes and
arguments, worker ids, log text, exception messages - so escaping has to be the default rather
than something each page remembers. Every builder here escapes what it is given unless it is
wrapped in `Html` (markup this module built, or that a caller built with `esc`). URLs taken
from peers (an app's UI URL, a worker's web UI address) only become links when they are
http(s) or same-site paths, so a `javascript:` URL can never turn into a clickable script.

The Prometheus writer is here for the same reason: one place that writes `# HELP` / `# TYPE`
lines and escapes label values, so no UI hand-builds the exposition format.
"""
from __future__ import annotations

import html
import logging
import math
import time
from typing import Any, Awaitable, Callable, Iterable, Mapping, Optional, Union
from urllib.parse import quote

from aiohttp import web

from ember.rpc import RpcError

__all__ = ["Html", "esc", "safe_url", "link", "url_with_query", "table", "page",
           "html_response", "not_found", "format_resources", "format_resource_usage",
           "format_date", "format_duration", "PrometheusText", "prometheus_response",
           "SECURITY_HEADERS", "ui_middleware", "PROMETHEUS_CONTENT_TYPE"]

# Spark's default security headers for its UIs (spark.ui.xXssProtection, ...).
SECURITY_HEADERS = {"X-Frame-Options": "SAMEORIGIN", "X-XSS-Protection": "1; mode=block",
                    "X-Content-Type-Options": "nosniff"}
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_CSS = """body{font-family:-apple-system,"Helvetica Neue",Arial,sans-serif;font-size:14px;
margin:0 20px 20px;color:#222}
h3{margin:16px 0 8px}h4{margin:20px 0 6px}
ul.summary{list-style:none;padding:0;margin:0}ul.summary li{margin:2px 0}
table{border-collapse:collapse;width:100%;margin-bottom:8px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}
td ul{list-style:none;padding:0;margin:0}
form.kill{display:inline;margin-left:4px}form.kill a{color:#c00;font-size:12px}
pre.log{background:#f8f8f8;border:1px solid #ddd;padding:8px;white-space:pre-wrap;
word-break:break-all}
.pager a,.pager span{margin-right:12px}.disabled{color:#999}"""


class Html(str):
    """A string that is already HTML: `esc` and the builders pass it through unchanged."""


def esc(value: Any) -> Html:
    """HTML-escape `value` (quotes included, so it is safe in attributes), unless it is
    already `Html`."""
    if isinstance(value, Html):
        return value
    return Html(html.escape(str(value), quote=True))


def safe_url(url: Any) -> Optional[str]:
    """`url` if it may become a link: absolute http(s) or a same-site path; None otherwise
    (javascript:, data:, protocol-relative '//host' ...)."""
    if not isinstance(url, str) or not url:
        return None
    lowered = url.strip().lower()
    if lowered.startswith(("http://", "https://")):
        return url
    if url.startswith("/") and not url.startswith("//"):
        return url
    return None


def link(href: Any, text: Any) -> Html:
    """`<a href>` with both parts escaped; just the text when `href` is not a safe URL."""
    url = safe_url(href)
    if url is None:
        return esc(text)
    return Html(f'<a href="{html.escape(url)}">{_cell(text)}</a>')


def url_with_query(base: str, **params: Any) -> str:
    """`base?k=v&...` with every value URL-encoded (ids come from peers)."""
    return base + "?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())


def _cell(value: Any) -> str:
    """`esc` without the Html wrapper: the hot path of big tables (thousands of cells)."""
    t = type(value)
    if t is Html:
        return value
    return str(value) if t is int else html.escape(str(value))


def table(headers: Iterable[Any], rows: Iterable[Iterable[Any]],
          anchor: Optional[str] = None) -> Html:
    """A table; every header and cell is escaped unless it is `Html`."""
    head = "".join(f"<th>{_cell(h)}</th>" for h in headers)
    body = "".join(["<tr><td>" + "</td><td>".join(map(_cell, row)) + "</td></tr>"
                    for row in rows])
    start = f'<table id="{esc(anchor)}">' if anchor else "<table>"
    return Html(f"{start}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def page(title: str, *content: Any) -> str:
    """A whole HTML document: `title` as <title> and heading, then `content` (escaped unless
    `Html`)."""
    t = esc(title)
    body = "\n".join(esc(c) for c in content)
    return (f'<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n<title>{t}</title>\n'
            f"<style>{_CSS}</style>\n</head>\n<body>\n<h3>{t}</h3>\n{body}\n</body>\n</html>\n")


def html_response(document: str, status: int = 200) -> web.Response:
    return web.Response(text=document, status=status, content_type="text/html",
                        charset="utf-8")


def not_found(message: str) -> web.Response:
    """The 404 page of every UI: the message (escaped) in the usual layout."""
    return html_response(page("Not Found", Html(f'<p class="error">{esc(message)}</p>')), 404)


def format_resources(resources: Mapping[str, Any]) -> str:
    """Spark's formatResourcesAddresses: `gpu: [0, 1], fpga: [f0]` (values with .addresses)."""
    return ", ".join(f"{name}: [{', '.join(str(a) for a in r.addresses)}]"
                     for name, r in resources.items())


def format_resource_usage(resources: Mapping[str, Any], used: Mapping[str, Any]) -> str:
    """Spark's formatWorkerResourcesDetails: `gpu: Free: [1] / Used: [0]`."""
    parts = []
    for name, info in resources.items():
        taken = [str(a) for a in used[name].addresses] if name in used else []
        free = [str(a) for a in info.addresses if str(a) not in taken]
        parts.append(f"{name}: Free: [{', '.join(free)}] / Used: [{', '.join(taken)}]")
    return ", ".join(parts)


def format_date(epoch_ms: int) -> str:
    """Spark's UIUtils.formatDate: `yyyy/MM/dd HH:mm:ss` in local time."""
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(epoch_ms / 1000.0))


def format_duration(ms: int) -> str:
    """Spark's UIUtils.formatDuration: '45 ms', '0.5 s', '12 s', '3.5 min', '42 min', '1.5 h'."""
    if ms < 100:
        return f"{int(ms)} ms"
    seconds = ms / 1000
    if seconds < 1:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 10:
        return f"{minutes:.1f} min"
    if minutes < 60:
        return f"{minutes:.0f} min"
    return f"{minutes / 60:.1f} h"


# ---------------------------------------------------------------------------------------------
# Prometheus text exposition format (version 0.0.4)
# ---------------------------------------------------------------------------------------------

Number = Union[int, float]


def _label_value(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(v: Number) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


class PrometheusText:
    """Builds a Prometheus text page: one `# HELP` and `# TYPE` line per metric family, then
    its samples. Label values are escaped (backslash, quote, newline)."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def add(self, name: str, kind: str, help_text: str,
            samples: Union[Number, Iterable[tuple[Mapping[str, Any], Number]]]
            ) -> "PrometheusText":
        """One family. `samples` is a bare number, or (labels, value) pairs."""
        help_line = help_text.replace("\\", "\\\\").replace("\n", "\\n")
        self._lines += [f"# HELP {name} {help_line}", f"# TYPE {name} {kind}"]
        if isinstance(samples, (int, float)):
            samples = [({}, samples)]
        for labels, value in samples:
            lbl = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items())
            self._lines.append(f"{name}{{{lbl}}} {_number(value)}" if lbl
                               else f"{name} {_number(value)}")
        return self

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def prometheus_response(metrics: PrometheusText) -> web.Response:
    return web.Response(body=metrics.text().encode("utf-8"),
                        headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})


# ---------------------------------------------------------------------------------------------
# Error handling and headers for every response
# ---------------------------------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def ui_middleware(log: logging.Logger, daemon: str) -> Any:
    """aiohttp middleware of every UI: HTTP errors as short plain text (aiohttp's wording),
    `daemon` (the endpoint the UI asks for its state) unreachable as 503, any other failure
    logged and answered 500 - never a stack trace - and Spark's security headers on
    everything."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as e:   # 404, 405, redirects: keep status, text, Location
            headers = {k: v for k, v in e.headers.items() if k.lower() != "content-length"}
            response = web.Response(status=e.status, reason=e.reason, text=e.text,
                                    headers=headers)
        except RpcError as e:
            log.warning("Cannot answer %s %s: %s", request.method, request.path, e)
            response = web.Response(status=503, text=f"503: {daemon} unavailable ({e})\n")
        except Exception:
            log.exception("Error serving %s %s", request.method, request.path)
            response = web.Response(status=500, text="500: Internal Server Error\n")
        for k, v in SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        response.headers["Server"] = "Ember"   # no version banner (Spark hides Jetty's too)
        return response

    return middleware
