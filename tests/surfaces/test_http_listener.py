"""The HTTP listener's socket: bound before start (a taken port is the start's error, port 0
resolved) and TCP by protocol number, so asyncio turns Nagle off on every accepted connection
(without it each response waited ~40 ms for a delayed ACK: 45 ms per MCP ping, 15 ms with)."""

from __future__ import annotations

import socket

import pytest

from agenttx.api.http.app import bind


def test_the_socket_is_tcp_by_number_so_accepted_connections_get_nodelay() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockname()[1] != 0
        with socket.create_connection(sock.getsockname()[:2]):
            sock.setblocking(True)
            accepted, _ = sock.accept()
            with accepted:
                # What asyncio's _set_nodelay checks before it sets TCP_NODELAY.
                assert accepted.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


def test_a_taken_port_cannot_be_bound_again() -> None:
    first = bind("127.0.0.1", 0)
    try:
        with pytest.raises(OSError):
            bind("127.0.0.1", first.getsockname()[1])
    finally:
        first.close()
