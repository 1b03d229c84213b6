"""A webhook redirected to a URL no request can reach (a port out of range) is dead-lettered
at once with that said, not retried as a transient failure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from http_receiver import Receiver, http_receiver
from test_effects_webhook import _post


@pytest.fixture
def hooks() -> Iterator[Receiver]:
    with http_receiver() as r:
        yield r


async def test_a_redirect_to_an_invalid_port_is_dead_lettered_once(
    open_engine: Any, hooks: Receiver, clock: Any
) -> None:
    hooks.script["/bad"] = [(302, {"Location": "http://example.com:99999/"})]
    engine = await open_engine(webhook_allow=[hooks.allow], clock=clock, background=False)
    tx, _ = await _post(engine, {"url": hooks.url("/bad"), "json": 1})
    await engine.commit(tx)
    [row] = await engine.store.list_outbox()
    assert row.status == "dead"
    assert "redirected to http://example.com:99999/, which is not a valid URL" in row.last_error
    assert len(hooks.requests("/bad")) == 1
