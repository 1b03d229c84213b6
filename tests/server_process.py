"""``agenttx serve`` as a real subprocess for the server, metrics and CLI tests.

The server binds port 0 for gRPC and metrics and logs JSON; the addresses it got are read
from its startup line, so tests never race for a free port.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from agenttx.wire import agenttx_pb2_grpc as pb_grpc

TESTS_DIR = Path(__file__).parent
AGENTTX = Path(sys.executable).with_name("agenttx")
_TEXT_STARTUP = re.compile(r"serving gRPC on (\S+) · store (\S+) · metrics (\S+)")


def agenttx_command(*args: str) -> list[str]:
    """The installed ``agenttx`` script, or the same CLI through this interpreter."""
    if AGENTTX.exists():
        return [str(AGENTTX), *args]
    return [sys.executable, "-c", "from agenttx.cli import main; main()", *args]


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

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM, then wait; returns the exit status."""
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
    timeout: float = 20.0,
) -> ServerProcess:
    """Start ``agenttx serve`` on free ports with the test tools loaded and wait until it
    says it is serving. Its working directory is ``tests/``, so ``--tools user_tools`` is
    found the way a user's module in the current directory is."""
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
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTTX_")}
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
