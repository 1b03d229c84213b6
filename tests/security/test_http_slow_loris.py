"""A slow loris against a real ``agenttx serve --http-addr``: connections that never finish
their request head (a byte now and then, never the blank line) are closed after the header
timeout, the oldest at once when too many wait, a normal client is served meanwhile, and the
server's descriptors come back. Before, every half-sent request was held for ever."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import httpx2
import pytest

from http_harness import http_base
from server_process import start_server

HEADER_TIMEOUT_S = 3
MAX_WAITING = 20
SLOW = 30  # slow connections opened; the first SLOW - MAX_WAITING are closed by the cap


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _closed(sock: socket.socket, within: float) -> bool:
    """True iff the server closes ``sock`` within ``within`` seconds (reads until EOF)."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:  # reset: closed too
        return True
    return True


@pytest.mark.serial
def test_half_sent_requests_are_closed_and_a_normal_client_is_served(tmp_path: Path) -> None:
    server = start_server(
        tmp_path / "data",
        env={
            "AGENTTX_HTTP_ADDR": "127.0.0.1:0",
            "AGENTTX_HTTP_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
            "AGENTTX_HTTP_MAX_WAITING_CONNECTIONS": str(MAX_WAITING),
        },
    )
    slow: list[socket.socket] = []
    with server.killed_on_error():
        base = http_base(server)
        host, port = base.removeprefix("http://").rsplit(":", 1)
        with httpx2.Client(base_url=base, timeout=10) as http:
            assert http.get("/v1/tools").status_code == 200  # warm: the app is loaded
        before = _descriptors(server.proc.pid)
        try:
            started = time.monotonic()
            for _ in range(SLOW):
                sock = socket.create_connection((host, int(port)))
                sock.sendall(f"GET /v1/tools HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
                slow.append(sock)
            # Too many waiting: the oldest are closed at once, the newest still wait.
            assert all(_closed(s, 5) for s in slow[: SLOW - MAX_WAITING])
            assert not _closed(slow[-1], 0.2)
            # A normal client is served meanwhile, quickly.
            with httpx2.Client(base_url=base, timeout=10) as http:
                t0 = time.monotonic()
                assert http.get("/v1/tools").status_code == 200
                assert time.monotonic() - t0 < 2
            # Trickling bytes does not buy time: only a whole head would.
            for sock in slow[SLOW - MAX_WAITING :]:
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass  # evicted by the normal client's connection: closed already
            deadline = started + HEADER_TIMEOUT_S + 5
            assert all(_closed(s, max(0.1, deadline - time.monotonic())) for s in slow)
            assert time.monotonic() - started >= HEADER_TIMEOUT_S - 0.5  # the timeout, not sooner
        finally:
            for sock in slow:
                sock.close()
        # Every descriptor the slow connections took is given back.
        deadline = time.monotonic() + 10
        while _descriptors(server.proc.pid) > before + 2:
            assert time.monotonic() < deadline, (before, _descriptors(server.proc.pid))
            time.sleep(0.1)
    assert server.terminate() == 0
