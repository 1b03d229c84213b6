"""A ``${env:NAME}`` value of the gateway file is a secret wherever the downstream server
sends it back (issue 14 point 5): in the listed tool's description and input schema
(``list_tools``, gRPC ListTools, ``agenttx tools``), in a failing call's hint, and in a log
line. The downstream here (``gateway_secret_server.py``) puts it in all of them, so each
assertion can fail."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agenttx import StepStatus
from gateway_servers import gateway_engine, write_gateway
from paths import TESTS

SERVER = TESTS.joinpath("gateway_secret_server.py")
SECRET = "tok-l34ky-listing-77"


@pytest.fixture
async def engine(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    monkeypatch.setenv("GW_LEAKY_TOKEN", SECRET)
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.leaky]
        command = "{sys.executable}"
        args = ["{SERVER}"]
        env = {{ TOKEN = "${{env:GW_LEAKY_TOKEN}}" }}

        [servers.leaky.tools.lookup]
        effect = "read"
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data", gateway)
    yield engine
    await engine.close()


async def test_the_listing_masks_the_secret(engine: Any) -> None:
    listed = {t["name"]: t for t in engine.list_tools()}
    lookup = listed["leaky.lookup"]
    assert "***" in lookup["description"]
    assert "***" in json.dumps(lookup["input_schema"])
    assert SECRET not in json.dumps(engine.list_tools())


async def test_a_hint_and_a_log_line_mask_it(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    tx = (await engine.begin()).transaction_id
    failed = await engine.execute_step(tx, 1, "leaky.lookup", {"ticket": "missing"})
    assert failed.status is not StepStatus.SUCCESS
    assert SECRET not in failed.clean_hint
    logging.getLogger("agenttx.gateway").info("calling with %s", SECRET)
    assert SECRET not in caplog.text
    assert "***" in caplog.text
