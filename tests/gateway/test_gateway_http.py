"""The gateway over streamable HTTP to a real SDK server (``gateway_downstream.py --http``):
the configured headers, with their ``${env:…}`` secret, are sent; AgentTx's own credentials
are not; and the tools work as steps like stdio ones."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agenttx.types import StepStatus
from gateway_servers import gateway_engine, write_gateway
from paths import TESTS
from server_process import free_port

SERVER = TESTS.joinpath("gateway_downstream.py")
TOKEN = "http-5ecret-token"


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        env={"KV_FILE": str(tmp_path / "kv.json"), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(address, timeout=1)
        except urllib.error.HTTPError:
            break  # it answers (a GET without a session is refused): it is up
        except OSError:
            time.sleep(0.1)
    try:
        yield address
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
async def engine(
    store_url: str, tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    monkeypatch.setenv("GW_HTTP_TOKEN", TOKEN)
    monkeypatch.setenv("AGENTTX_API_KEY", "atx-key-stays-home")
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.remote]
        url = "{url}"
        headers = {{ Authorization = "Bearer ${{env:GW_HTTP_TOKEN}}" }}
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data", gateway)
    yield engine
    await engine.close()


async def test_the_configured_headers_and_only_they_are_sent(engine: Any) -> None:
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(tx, 1, "remote.seen_headers", {})
    assert step.status is StepStatus.SUCCESS, step.clean_hint
    headers = step.output["headers"]
    # The real token arrived (its digest), and AgentTx's own copy of the output masks it.
    sent = hashlib.sha256(f"Bearer {TOKEN}".encode()).hexdigest()
    assert ["authorization", sent] in step.output["header_sha256"]
    assert headers["authorization"] == "***"
    assert "atx-key-stays-home" not in str(headers)


async def test_http_tools_are_steps_like_stdio_ones(engine: Any, tmp_path: Path) -> None:
    effects = {t["name"]: t["effect"] for t in engine.list_tools() if t.get("server") == "remote"}
    assert effects["remote.get"] == "read"
    assert effects["remote.create"] == "compensatable"
    tx = (await engine.begin()).transaction_id
    created = await engine.execute_step(tx, 1, "remote.create", {"key": "k", "value": "v"})
    assert created.status is StepStatus.SUCCESS, created.clean_hint
    await engine.rollback(tx)
    tx = (await engine.begin()).transaction_id
    gone = await engine.execute_step(tx, 1, "remote.get", {"key": "k"})
    assert gone.status is not StepStatus.SUCCESS
    assert "no such key" in gone.clean_hint
