"""The one server harness for every test: free ports, ``agenttx serve`` as a subprocess, an
engine's gRPC server in-process, and restartable replicas on PostgreSQL.

- ``free_port()``: a port nothing listens on now, for a server that must come back on the
  same address (a late start, a restarted replica). Prefer port 0 wherever the server can tell
  its address back: ``start_server`` reads it from the startup line, ``serving`` and
  ``ServerThread`` from the bound socket, so those never race for a port.
- ``start_server(data_dir, *args)`` → ``ServerProcess``: ``agenttx serve`` in a subprocess
  (working directory ``tests/``, JSON logs, the test tools loaded), for the server, metrics
  and CLI tests.
- ``serving(engine)``: an engine's gRPC server started on the test's own event loop (async
  tests with an async stub); yields the target address.
- ``ServerThread``: an engine and its gRPC server on an event loop in a thread of their own,
  so a blocking client can call it from the test's thread.
- ``Replica``: one ``agenttx serve`` subprocess of a cluster on PostgreSQL, on a fixed port so
  it can be SIGKILLed and restarted where its clients expect it.

Every subprocess gets the environment without ``AGENTTX_*`` variables (``server_env``), so
a developer's own settings never leak into a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

import agenttx
from agenttx.api.grpc.server import build_server, mark_serving
from agenttx.wire import agenttx_pb2_grpc as pb_grpc

T = TypeVar("T")
TESTS_DIR = Path(__file__).parent
AGENTTX = Path(sys.executable).with_name("agenttx")
SERVICE_NAME = "agenttx.v1.AgentTxService"
_TEXT_STARTUP = re.compile(r"serving gRPC on (\S+) · store (\S+) · metrics (\S+)")


# --------------------------------------------------------------------------- ports and commands


def free_port() -> int:
    """A port nothing listens on now. The server binds it a moment later, so another process
    could take it in between; a clash shows as the server's own start-up error, not a hang."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agenttx_command(*args: str) -> list[str]:
    """The installed ``agenttx`` script, or the same CLI through this interpreter."""
    if AGENTTX.exists():
        return [str(AGENTTX), *args]
    return [sys.executable, "-c", "from agenttx.cli import main; main()", *args]


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``AGENTTX_*`` settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTTX_")}
    env.update(extra or {})
    return env


# --------------------------------------------------------------------------- agenttx serve


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path
    address: str
    metrics_url: str  # "off" when disabled

    def log_text(self) -> str:
        return self.log_path.read_text()

    def log_records(self) -> list[dict[str, Any]]:
        """Every JSON log line so far (the server runs with --log-format json by default)."""
        return [json.loads(line) for line in self.log_text().splitlines() if line.startswith("{")]

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address)

    def stub(self, channel: grpc.Channel) -> Any:
        return pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait (60 s at most: the drain and close took over 15 s on a busy
        machine); returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    @contextmanager
    def killed_on_error(self) -> Iterator[None]:
        """For fixture set-up: a failure kills the server instead of leaving it running."""
        try:
            yield
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_server(
    data_dir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    log_format: str = "json",
    timeout: float = 60.0,
) -> ServerProcess:
    """Start ``agenttx serve`` on free ports with the test tools loaded and wait until it
    says it is serving (or has exited: a start that fails returns as soon as it does, so the
    generous bound costs nothing; on a busy 2-core machine the imports alone took 10-17 s).
    Its working directory is ``tests/``, so ``--tools user_tools`` is found the way a user's
    module in the current directory is."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"{data_dir.name}.log"
    command = agenttx_command(
        "serve",
        "--data-dir",
        str(data_dir),
        "--log-format",
        log_format,
        "--tools",
        "user_tools",
        *args,
    )
    full_env = server_env()
    # Port 0: the server picks its ports and prints them, so tests never race for one.
    full_env.setdefault("AGENTTX_LISTEN_ADDR", "127.0.0.1:0")
    full_env.setdefault("AGENTTX_METRICS_ADDR", "127.0.0.1:0")
    full_env.update(env or {})
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            command, cwd=TESTS_DIR, env=full_env, stdout=log_file, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text()
        for line in text.splitlines():
            if line.startswith("{") and json.loads(line).get("event") == "serving":
                record = json.loads(line)
                return ServerProcess(proc, log_path, record["listen_addr"], record["metrics"])
            found = _TEXT_STARTUP.search(line)
            if found:
                return ServerProcess(proc, log_path, found[1], found[3])
        if proc.poll() is not None:
            raise AssertionError(f"agenttx serve exited with {proc.returncode}:\n{text}")
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"agenttx serve did not start within {timeout}s:\n{log_path.read_text()}")


# --------------------------------------------------------------------------- in-process servers


@asynccontextmanager
async def serving(
    engine: agenttx.Engine, port: int = 0, *, interceptors: Sequence[Any] = ()
) -> AsyncIterator[str]:
    """``engine``'s gRPC server (health SERVING) on the running loop, with these server
    ``interceptors`` (e.g. the metrics ``CallObserver``); yields its target. The server is
    stopped on exit; the engine stays the caller's to close."""
    server = build_server(engine, interceptors=interceptors)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        await mark_serving(server)
        yield f"127.0.0.1:{bound}"
    finally:
        await server.stop(None)


class ServerThread:
    """An engine and its gRPC server on an event loop of their own, in a daemon thread, so a
    blocking client can call it from the test's thread. ``port=0`` binds a free port;
    a fixed one (``free_port()``) lets a client be made before the server starts."""

    def __init__(
        self,
        tmp_path: Path,
        port: int = 0,
        *,
        tools: Sequence[Any] = (),
        url: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        self.tmp_path = tmp_path
        self.port = port
        self.url = url or f"sqlite:///{tmp_path / 'agenttx.db'}"
        self.engine_kwargs = {
            "fs_root": tmp_path / "files",
            "outbox_path": tmp_path / "outbox.jsonl",
            "tools": list(tools),
            **engine_kwargs,
        }
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server's loop and wait for its result (60 s at most: opening
        an engine on PostgreSQL on a loaded machine takes seconds)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    async def _start(self) -> None:
        self.engine = await agenttx.Engine.open(self.url, **self.engine_kwargs)
        self._serving = serving(self.engine, self.port)
        target = await self._serving.__aenter__()
        self.port = int(target.rsplit(":", 1)[1])

    async def _stop(self) -> None:
        await self._serving.__aexit__(None, None, None)
        await self.engine.close()

    def start(self) -> ServerThread:
        self.run(self._start())
        return self

    def stop(self) -> None:
        if hasattr(self, "_serving"):
            self.run(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


# --------------------------------------------------------------------------- replicas


@dataclass
class Replica:
    """One ``agenttx serve`` replica on a shared store; ``restart`` brings it back on the
    same port. Its log (every start appended) is ``<data_dir>.log``."""

    index: int
    store_url: str
    data_dir: Path
    fs_root: Path  # shared by all replicas: any of them may undo another's fs.write
    tools: str = "cluster_tools"
    start_timeout: float = 60.0  # three replicas import and migrate at once: slow when busy
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def outbox(self) -> Path:
        return self.data_dir / "outbox.jsonl"

    @property
    def log_path(self) -> Path:
        return self.data_dir.with_suffix(".log")

    def spawn(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = server_env(
            {
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH", "")) if p
                )
            }
        )
        command = agenttx_command(
            "serve",
            "--listen-addr",
            self.address,
            "--store",
            self.store_url,
            "--data-dir",
            str(self.data_dir),
            "--fs-root",
            str(self.fs_root),
            "--tools",
            self.tools,
            "--metrics-addr",
            "off",
            "--log-format",
            "json",
            "--log-level",
            "warning",
        )
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts + 1}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                command, cwd=TESTS_DIR, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.starts += 1

    def wait_started(self) -> None:
        """Wait until the replica's health service says SERVING (it is marked so only once
        recovery ran and gRPC is bound)."""
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                try:
                    reply = stub.Check(
                        health_pb2.HealthCheckRequest(service=SERVICE_NAME),
                        timeout=1,
                    )
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if self.proc.poll() is not None:
                    raise AssertionError(
                        f"replica {self.index} exited with {self.proc.returncode}:\n"
                        f"{self.log_path.read_text(errors='replace')[-4000:]}"
                    )
                if time.monotonic() > deadline:
                    self.proc.kill()
                    raise AssertionError(
                        f"replica {self.index} did not start:\n{self.log_path.read_text()}"
                    )
                time.sleep(0.05)

    def sigkill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def restart(self) -> None:
        self.spawn()
        self.wait_started()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
