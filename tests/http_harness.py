"""The HTTP/JSON API's test harness: a real ``agenttx serve --http-addr`` and plain
``http.client`` requests against it (no client library between the test and the wire)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from server_process import ServerProcess, start_server

JSON = {"content-type": "application/json"}


def http_base(server: ServerProcess) -> str:
    """``http://127.0.0.1:<port>`` of the server's HTTP listener (from its startup record)."""
    [record] = [r for r in server.log_records() if r.get("event") == "serving"]
    url = str(record["mcp_http"])
    assert url.endswith("/mcp"), url
    return url.removesuffix("/mcp")


def start_http_server(data_dir: Path, *args: str) -> ServerProcess:
    return start_server(data_dir, *args, env={"AGENTTX_HTTP_ADDR": "127.0.0.1:0"})


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


def request(
    base: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> Reply:
    host = urlsplit(base).netloc
    conn = http.client.HTTPConnection(host, timeout=timeout)
    try:
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        sent = dict(JSON if body is not None else {}, **(headers or {}))
        conn.request(method, path, body=data, headers=sent)
        r = conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def sse_events(
    base: str, path: str, *, timeout: float = 30, headers: dict[str, str] | None = None
) -> Iterator[dict[str, Any]]:
    """The ``data`` of each server-sent event of ``path``, as it arrives. The request is made
    here, before the first ``next``: once this returns, the server has subscribed."""
    host = urlsplit(base).netloc
    conn = http.client.HTTPConnection(host, timeout=timeout)
    conn.request("GET", path, headers={"accept": "text/event-stream", **(headers or {})})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    assert r.getheader("content-type", "").startswith("text/event-stream")
    return _events(conn, r)


def _events(conn: http.client.HTTPConnection, r: Any) -> Iterator[dict[str, Any]]:
    try:
        fields: dict[str, str] = {}
        while True:
            line = r.readline()
            if not line:
                return
            text = line.decode().rstrip("\n")
            if not text:
                if "data" in fields:
                    data = json.loads(fields["data"])
                    yield {"id": fields.get("id"), "event": fields.get("event"), **data}
                fields = {}
            elif not text.startswith(":"):
                name, _, value = text.partition(": ")
                fields[name] = value
    finally:
        conn.close()


def assert_error_shape(reply: Reply, status: int, reason: str | None = None) -> dict[str, Any]:
    """The reply is the one documented error shape, with this status (and reason)."""
    assert reply.status == status, (reply.status, reply.raw[:500])
    assert reply.headers["content-type"].startswith("application/json")
    error = reply.json["error"]
    assert set(error) == {"code", "reason", "message", "details", "continuation"}
    assert isinstance(error["message"], str)
    assert error["message"]
    assert error["continuation"]["kind"] in {
        "CallTool",
        "ChooseTool",
        "RetryRequest",
        "ReviseRequest",
        "ResolveExternally",
    }
    assert error["continuation"]["instruction"]
    if reason is not None:
        assert error["reason"] == reason, error
    return dict(error)
