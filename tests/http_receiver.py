"""A real HTTP server for the webhook tests: ``http.server`` on a loopback port in a thread,
recording every request and answering from a script per path.

``script["/path"] = [500, 200]`` (the path without its query) answers 500 to the first POST
there and 200 from then on (the last entry repeats); an entry may be ``(status, headers)``,
for a redirect's Location.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = int | tuple[int, dict[str, str]]


@dataclass
class Seen:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass
class Receiver:
    port: int = 0
    script: dict[str, list[Answer]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set: answer at once. ``hold()`` clears it: a request is recorded, then its answer waits
    # (a test kills the sender mid-delivery); ``release()`` lets it go.
    held: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.held.set()

    def hold(self) -> None:
        self.held.clear()

    def release(self) -> None:
        self.held.set()

    def wait_for(self, count: int, timeout: float = 60.0) -> list[Seen]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.seen) >= count:
                    return list(self.seen)
            time.sleep(0.02)
        raise AssertionError(f"{count} requests expected, {len(self.seen)} arrived")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def allow(self) -> str:
        return f"127.0.0.1:{self.port}"

    def requests(self, path: str | None = None) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if path is None or s.path == path]

    def answer(self, path: str) -> Answer:
        with self.lock:
            answers = self.script.get(path, [200])
            return answers.pop(0) if len(answers) > 1 else answers[0]


@contextmanager
def http_receiver(tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    """A receiver on 127.0.0.1 (HTTPS with the server context ``tls``), stopped at the end."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            with receiver.lock:
                receiver.seen.append(
                    Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
            receiver.held.wait(120)
            answer = receiver.answer(self.path.partition("?")[0])
            status, headers = answer if isinstance(answer, tuple) else (answer, {})
            text = f"status {status}".encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release()
        server.shutdown()
        server.server_close()
