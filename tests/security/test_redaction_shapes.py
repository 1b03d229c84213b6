"""Redaction of the shapes issue 30 found unmasked: plurals and compounds (``passwords``,
``tokens``, ``api_keys``, ``secrets.db``), a field named ``bearer``, and name/value pair lists
(``[{"name": "Authorization", "value": …}]``) — in stored arguments and replies (both stores)
and in free text (log lines, hints) — while ordinary look-alikes stay readable."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest

import agenttx
from agenttx import StepStatus, logs
from agenttx.core.masking import Redactor
from agenttx.redaction import redact

SECRETS = ("pw-plural-1", "tok-plural-1", "key-plural-1", "dotted-secret-1", "bearer-field-1",
           "header-pair-1", "header-pair-2")  # fmt: skip
SHAPES = {
    "passwords": ["pw-plural-1"],
    "tokens": "tok-plural-1",
    "api_keys": "key-plural-1",
    "secrets.db": "dotted-secret-1",
    "bearer": "bearer-field-1",
    "headers": [
        {"name": "Authorization", "value": "Basic header-pair-1"},
        {"name": "X-Api-Key", "value": "header-pair-2"},
        {"name": "Accept", "value": "application/json"},
    ],
    "max_tokens": 4096,
    "token_count": 7,
    "password_hint": "the usual",
    "tokenizer": "cl100k",
}
received: list[Any] = []


@agenttx.tool(name="test.shapes")
async def shapes(ctx: agenttx.ToolContext, value: Any) -> Any:
    received.append(value)
    return {"echo": value}


def test_the_rule_reads_word_parts_plurals_and_compounds() -> None:
    r = Redactor()
    for name in ("passwords", "tokens", "api_keys", "secrets.db", "bearer", "accessTokens",
                 "APIKeys", "password_file", "authorization_code", "client_secrets"):  # fmt: skip
        assert r.is_secret(name), name
    plain = ("max_tokens", "token_count", "prompt_tokens", "tokens_used", "password_hint",
             "token_type", "secret_name", "tokenizer", "passwordless", "key")  # fmt: skip
    for name in plain:
        assert not r.is_secret(name), name


async def test_stored_arguments_and_replies_mask_the_shapes(open_engine: Any) -> None:
    received.clear()
    engine: agenttx.Engine = await open_engine(tools=[shapes])
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "test.shapes", {"value": SHAPES})
    assert r.status is StepStatus.SUCCESS, r
    assert received == [SHAPES]  # the tool gets the real values
    steps = await engine.store.load_steps(tx, live_only=False)
    view = await engine.get_transaction(tx)
    kept = json.dumps([r.output, [(s.arguments_json, s.output_json) for s in steps]])
    kept += repr(view)
    for secret in SECRETS:
        assert secret not in kept, secret
    echo = r.output["echo"]
    assert echo["headers"][0] == {"name": "Authorization", "value": "***"}
    assert echo["headers"][2]["value"] == "application/json"
    assert (echo["max_tokens"], echo["token_count"]) == (4096, 7)
    assert (echo["password_hint"], echo["tokenizer"]) == ("the usual", "cl100k")


@pytest.mark.parametrize(
    "text",
    [
        'tokens=tok-plural-1 api_keys=key-plural-1 "secrets.db": "dotted-secret-1"',
        '{"bearer": "bearer-field-1"} bearer=bearer-field-1',
        '[{"name": "X-Api-Key", "value": "header-pair-2"}]',
        "[{'Key': 'DB_PASSWORD', 'Value': 'header-pair-1'}]",
    ],
)
def test_free_text_and_log_lines_mask_the_shapes(text: str) -> None:
    assert not any(secret in redact(text) for secret in SECRETS), redact(text)
    root = logging.getLogger("agenttx")
    saved = (list(root.handlers), root.level, root.propagate)
    stream = io.StringIO()
    logs.configure("text", "info", stream)
    try:
        logging.getLogger("agenttx.test").info("call with %s", text)
    finally:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]
    assert not any(secret in stream.getvalue() for secret in SECRETS), stream.getvalue()
    # Ordinary counts stay readable.
    assert redact("max_tokens=4096 cannot open secrets.db: gone") == (
        "max_tokens=4096 cannot open secrets.db: gone"
    )
