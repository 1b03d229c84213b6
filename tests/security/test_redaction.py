"""Redaction: the tool gets the real values; everything AgentTx stores or returns after it ran
(arguments, outputs, raw context, the raw error, hints, metadata, audit records, listings) has
secret-looking fields masked. Both stores; the rows themselves are searched for the secrets."""

from __future__ import annotations

import json
from typing import Any

import pytest

import agenttx
from agenttx import StepStatus
from agenttx.core.masking import MASK, Redactor

SECRETS = ("hunter2", "sekrit-bearer-value", "tok-abc-123", "s3cr3t-url-pw", "123-45-6789")
received: list[Any] = []


@agenttx.tool(name="test.login")
async def login(ctx: agenttx.ToolContext, user: str, password: str, headers: dict[str, str]) -> Any:
    received.append((password, headers))
    return {
        "user": user,
        "session": {"access_token": "tok-abc-123", "expires_in": 60},
        "dsn": "postgresql://app:s3cr3t-url-pw@db/app",
        "max_tokens": 4096,
    }


@agenttx.tool(name="test.fail_login")
async def fail_login(ctx: agenttx.ToolContext, password: str) -> Any:
    raise PermissionError(f"login refused: password={password} is wrong")


@agenttx.tool(name="test.pin")
async def pin(ctx: agenttx.ToolContext, pin_code: str, api_key: int) -> Any:
    raise AssertionError("never called: api_key is refused")


@agenttx.tool(name="test.quote")
async def quote(ctx: agenttx.ToolContext, client_secret: str) -> Any:
    raise ValueError(f"upstream said: {client_secret} is not recognised")


@agenttx.tool(name="test.echo")
async def echo(ctx: agenttx.ToolContext, value: Any) -> Any:
    return {"value": value}


@pytest.fixture
async def engine(open_engine: Any) -> agenttx.Engine:
    received.clear()
    engine: agenttx.Engine = await open_engine(
        tools=[login, fail_login, echo, pin, quote], redact_fields=[r"ssn|social_security_\w+"]
    )
    return engine


async def everything_stored(engine: agenttx.Engine, tx: str) -> str:
    """Every row of the transaction as text: the step rows, the record and the audit chain."""
    steps = await engine.store.load_steps(tx, live_only=False)
    row = await engine.store.get_transaction(tx)
    audit = await engine.store.load_audit(tx)
    return json.dumps(
        [
            [(s.arguments_json, s.output_json, s.raw_context, s.detail) for s in steps],
            row.body if row else None,
            [a.body for a in audit],
        ]
    )


def test_secret_names_are_told_from_look_alikes() -> None:
    r = Redactor(["ssn"])
    for name in (
        "password",
        "db_password",
        "clientSecret",
        "X-Api-Key",
        "api_key",
        "apiKey",
        "access_token",
        "Authorization",
        "set-cookie",
        "private_key",
        "session_id",
        "credentials",
        "SSN",
    ):
        assert r.is_secret(name), name
    # "tokens" alone is a list of credentials (issue 30): plural names are secret since then.
    for name in ("max_tokens", "token_count", "password_hint", "key", "user", "keyboard"):
        assert not r.is_secret(name), name


async def test_the_tool_gets_real_values_and_nothing_keeps_them(engine: agenttx.Engine) -> None:
    tx = (
        await engine.begin(metadata={"goal": "sign in", "api_token": "hunter2"}, request_id="b1")
    ).transaction_id
    r = await engine.execute_step(
        tx,
        1,
        "test.login",
        {
            "user": "ann",
            "password": "hunter2",
            "headers": {"Authorization": "Bearer sekrit-bearer-value", "Accept": "json"},
        },
        raw_context="logging in with password=hunter2 as ann",
        request_id="s1",
    )
    assert r.status is StepStatus.SUCCESS, r
    assert received == [
        ("hunter2", {"Authorization": "Bearer sekrit-bearer-value", "Accept": "json"})
    ]
    # The reply: the secret fields masked, the rest as the tool returned it.
    assert r.output["session"] == {"access_token": MASK, "expires_in": 60}
    assert r.output["dsn"] == f"postgresql://app:{MASK}@db/app"
    assert r.output["max_tokens"] == 4096
    assert r.output["user"] == "ann"
    # A reference to a masked field gets the mask, the same before and after a restart.
    ref = await engine.execute_step(
        tx, 2, "test.echo", {"value": "${steps.1.session.access_token}"}
    )
    assert ref.output == {"value": MASK}

    info = await engine.get_transaction(tx)
    first = info.steps[0]
    assert first.arguments["password"] == MASK
    assert first.arguments["headers"] == {"Authorization": MASK, "Accept": "json"}
    assert first.output["session"]["access_token"] == MASK
    assert info.context[0].raw_context == f"logging in with password={MASK} as ann"
    assert info.metadata == {"goal": "sign in", "api_token": MASK}
    [listed] = (await engine.list_transactions_page()).transactions
    assert listed.metadata == {"goal": "sign in", "api_token": MASK}
    # A retry of the same request replays the stored (masked) reply.
    again = await engine.execute_step(
        tx,
        1,
        "test.login",
        {
            "user": "ann",
            "password": "hunter2",
            "headers": {"Authorization": "Bearer sekrit-bearer-value", "Accept": "json"},
        },
        raw_context="logging in with password=hunter2 as ann",
        request_id="s1",
    )
    assert again.output["session"]["access_token"] == MASK

    stored = await everything_stored(engine, tx)
    for secret in SECRETS:
        assert secret not in stored, secret


async def test_a_failure_s_raw_error_and_hint_are_masked(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "test.fail_login", {"password": "hunter2"})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert "hunter2" not in r.clean_hint
    stored = await everything_stored(engine, tx)
    assert "hunter2" not in stored
    assert "login refused" in stored  # the error is kept, only the secret is masked


async def test_configured_field_patterns_are_masked_too(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(
        tx, 1, "test.echo", {"value": {"ssn": "123-45-6789", "social_security_no": "123-45-6789"}}
    )
    assert r.output == {"value": {"ssn": MASK, "social_security_no": MASK}}
    assert "123-45-6789" not in await everything_stored(engine, tx)


async def test_a_bad_pattern_is_refused_naming_it(open_engine: Any) -> None:
    with pytest.raises(agenttx.InvalidArgument, match=r"--redact-field '\(' is not a regex"):
        await open_engine(redact_fields=["("])


def test_log_lines_are_masked() -> None:
    import io
    import logging

    from agenttx import logs

    root = logging.getLogger("agenttx")
    saved = (list(root.handlers), root.level, root.propagate)
    for fmt in ("text", "json"):
        stream = io.StringIO()
        logs.configure(fmt, "info", stream)
        try:
            try:
                raise ConnectionError("cannot reach postgresql://app:hunter2@db/app")
            except ConnectionError:
                logging.getLogger("agenttx.test").exception(
                    "call failed with password=hunter2", extra={"note": "Bearer sekrit-value"}
                )
        finally:
            root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]
        text = stream.getvalue()
        assert "call failed" in text
        assert "hunter2" not in text, text
        assert "sekrit-value" not in text, text


async def test_hints_never_quote_a_secret_argument(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    # A validation error quotes the refused value; a tool quotes it in its own words.
    refused = await engine.execute_step(
        tx, 1, "test.pin", {"pin_code": "1234", "api_key": "hunter2-not-an-int"}
    )
    assert refused.status is StepStatus.ROLLBACK_TRIGGERED
    assert "api_key" in refused.clean_hint
    quoted = await engine.execute_step(
        tx, 1, "test.quote", {"client_secret": "sekrit-bearer-value"}
    )
    assert quoted.status is StepStatus.ROLLBACK_TRIGGERED
    info = await engine.get_transaction(tx)
    stored = await everything_stored(engine, tx)
    for text in (refused.clean_hint, quoted.clean_hint, stored, *info.constraints):
        assert "hunter2-not-an-int" not in text
        assert "sekrit-bearer-value" not in text


def test_masked_values_never_link_in_the_graph() -> None:
    from agenttx.core.graph import DependencyGraph

    graph = DependencyGraph()
    graph.add_step(1, {"password": MASK}, {"password": MASK, "id": "u-1"})
    graph.add_step(2, {"password": MASK, "user_id": "u-1"}, {})
    # The id links (user_id <- id); the two masks, equal as text, do not.
    assert {(e.source, e.target, e.key) for e in graph.edges()} == {(1, 2, "id")}
