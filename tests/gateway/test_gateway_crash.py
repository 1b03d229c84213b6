"""A staged downstream call survives a crash: ``agenttx serve --gateway`` is SIGKILLed after a
commit is durable and before its ``files.write_file`` is delivered (the filesystem server is
restarting, held back by a gate); after a restart the file is written, once, and a further
restart writes nothing again. Also: the gateway's tools in ``ListTools`` and the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agenttx.client import AgentTxClient
from gateway_servers import npm_server, write_gateway
from server_process import TESTS_DIR, ServerProcess, agenttx_command, server_env, start_server

pytestmark = pytest.mark.stores("sqlite")  # a process crash on the embedded store

WRAPPER = """#!/bin/sh
# Records its pid, waits while the gate file exists, then becomes the filesystem server.
echo $$ >> "$PIDS"
while [ -e "$GATE" ]; do sleep 0.05; done
exec "$BIN" "$ROOT"
"""


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[dict[str, Path]]:
    root = tmp_path / "srv"
    root.mkdir()
    wrapper = tmp_path / "fs-wrapper.sh"
    wrapper.write_text(WRAPPER)
    paths = {"root": root, "gate": tmp_path / "gate", "pids": tmp_path / "pids"}
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.files]
        command = "/bin/sh"
        args = ["{wrapper}"]
        include = ["write_file", "read_text_file"]

        [servers.files.env]
        GATE = "{paths["gate"]}"
        PIDS = "{paths["pids"]}"
        BIN = "{npm_server("mcp-server-filesystem")}"
        ROOT = "{root}"
        """,
    )
    paths["gateway"] = gateway
    paths["data"] = tmp_path / "data"
    yield paths
    paths["gate"].unlink(missing_ok=True)
    for line in paths["pids"].read_text().split() if paths["pids"].exists() else []:
        if _ours(int(line), tmp_path):
            os.kill(int(line), signal.SIGKILL)


def _ours(pid: int, tmp_path: Path) -> bool:
    """Is ``pid`` still a wrapper or filesystem server of this test? A recorded pid whose
    process ended may already be another process's (pid_max is often 32768, and a busy
    machine wraps it in minutes): killing it blindly killed unrelated processes — the test
    run itself among them. Both the wrapper and the server it becomes name a path under
    ``tmp_path`` on their command line."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone (or no /proc): nothing to kill
        return False
    return str(tmp_path).encode() in cmdline


def serve(paths: dict[str, Path]) -> ServerProcess:
    return start_server(paths["data"], "--gateway", str(paths["gateway"]), timeout=60)


def journal(paths: dict[str, Path]) -> list[dict[str, str]]:
    path = paths["data"] / "gateway-deliveries.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_tools_are_listed_over_grpc_and_the_cli(setup: dict[str, Path]) -> None:
    server = serve(setup)
    try:
        with AgentTxClient(server.address) as client:
            tools = {t.name: t for t in client.list_tools()}
        assert tools["files.write_file"].server == "files"
        assert tools["files.write_file"].effect == "staged"
        assert "content" in tools["files.write_file"].input_schema["properties"]
        assert tools["kv.put"].server == ""
        done = subprocess.run(
            agenttx_command("tools", "--server", server.address, "--json"),
            cwd=TESTS_DIR,
            env=server_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        listed = {t["name"]: t for t in json.loads(done.stdout)}
        assert listed["files.read_text_file"]["effect"] == "read"
        assert listed["files.read_text_file"]["server"] == "files"
    finally:
        server.terminate()


def test_a_sigkill_after_commit_and_before_delivery_still_delivers_once(
    setup: dict[str, Path],
) -> None:
    target = setup["root"] / "report.txt"
    server = serve(setup)
    with server.killed_on_error():
        client = AgentTxClient(server.address)
        tx = client.begin().transaction_id
        step = client.execute_step(
            tx, 1, "files.write_file", {"path": str(target), "content": "quarterly"}
        )
        assert step.status.value == "SUCCESS", step.clean_hint
        # The filesystem server dies and is held back while AgentTx reopens the session:
        # the delivery after commit has to wait for it.
        setup["gate"].touch()
        first = int(setup["pids"].read_text().split()[0])
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: len(setup["pids"].read_text().split()) >= 2, 30, "the session restart")
        committing = threading.Thread(target=lambda: _commit_quietly(client, tx), daemon=True)
        committing.start()
        with AgentTxClient(server.address) as watcher:
            wait_for(
                lambda: watcher.get_transaction(tx).status.value == "COMMITTED", 30, "the commit"
            )
        server.kill()  # SIGKILL: committed, not delivered
    assert not target.exists()
    assert journal(setup) == []  # the call was never started
    setup["gate"].unlink()

    server = serve(setup)
    try:
        # "done" is journaled once the server answered, so the write is complete by then.
        wait_for(lambda: any(e["state"] == "done" for e in journal(setup)), 60, "the delivery")
        assert target.read_text() == "quarterly"
        made = target.stat().st_mtime_ns
    finally:
        server.terminate()
    server = serve(setup)  # and once more: nothing is delivered again
    try:
        time.sleep(1.5)
        assert target.stat().st_mtime_ns == made
        states = [e["state"] for e in journal(setup)]
        assert states == ["started", "done"]
    finally:
        server.terminate()


def _commit_quietly(client: AgentTxClient, tx: str) -> None:
    try:
        client.commit(tx)
    except Exception:  # the server is killed under the call: its reply never comes
        pass
