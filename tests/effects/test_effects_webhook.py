"""webhook.post: staged with its step, POSTed once after a durable commit to a real HTTP
server with the effect's Idempotency-Key (and an HMAC signature when a secret is set); the
server's real answers drive retry (500 then 200, 429), dead letters (400, a redirect to a
refused address) and followed redirects inside the allow-list."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

import agenttx
from agenttx.effects import Effect
from agenttx.effects.webhook import WebhookChannel, signature
from agenttx.errors import PermanentDeliveryError
from agenttx.outbound import OutboundGuard
from agenttx.types import StepStatus
from http_receiver import Receiver, http_receiver

SECRET = b"whsec-test"


@pytest.fixture
def hooks() -> Iterator[Receiver]:
    with http_receiver() as r:
        yield r


async def _post(engine: agenttx.Engine, arguments: dict[str, Any]) -> tuple[str, Any]:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "webhook.post", arguments)
    assert r.status is StepStatus.SUCCESS, r.clean_hint
    return tx, r


async def test_a_committed_webhook_arrives_once_with_its_key_and_signature(
    open_engine: Any, hooks: Receiver, clock: Any
) -> None:
    engine = await open_engine(webhook_allow=[hooks.allow], webhook_secret=SECRET, clock=clock)
    tx, r = await _post(
        engine,
        {
            "url": hooks.url("/orders?src=agent"),
            "json": {"order": 1042, "event": "refunded"},
            "headers": {"X-Tenant": "acme"},
            "idempotency_key": "refund-1042",
        },
    )
    assert r.output["idempotency_key"] == "refund-1042"
    dropped, _ = await _post(engine, {"url": hooks.url("/never"), "json": {}})
    await engine.rollback(dropped)
    assert hooks.requests() == []  # nothing leaves before commit
    c = await engine.commit(tx)
    assert (c.effects_dispatched, c.dispatch_errors) == (1, [])

    (seen,) = hooks.requests()
    assert seen.path == "/orders?src=agent"
    assert json.loads(seen.body) == {"order": 1042, "event": "refunded"}
    assert seen.headers["idempotency-key"] == "refund-1042"
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["x-tenant"] == "acme"
    assert seen.headers["host"] == hooks.allow
    # The receiver checks the signature: HMAC-SHA256 of "<t>.<key>.<body>" under the secret.
    t, v1 = (part.split("=", 1)[1] for part in seen.headers["x-agenttx-signature"].split(","))
    expected = hmac.new(SECRET, f"{t}.refund-1042.".encode() + seen.body, hashlib.sha256)
    assert v1 == expected.hexdigest()
    assert int(t) == int(clock())
    assert await engine.dispatcher.run_once() == 0  # delivered stays delivered


async def test_500_then_200_is_retried_with_the_same_key(
    open_engine: Any, hooks: Receiver, clock: Any
) -> None:
    hooks.script["/flaky"] = [500, 200]
    engine = await open_engine(
        webhook_allow=[hooks.allow], clock=clock, background=False, dispatch_backoff_s=1.0
    )
    tx, _ = await _post(engine, {"url": hooks.url("/flaky"), "body": "ping"})
    c = await engine.commit(tx)
    assert c.effects_dispatched == 0
    assert "HTTP 500" in c.dispatch_errors[0]
    (row,) = await engine.store.list_outbox()
    assert (row.status, row.attempts) == ("pending", 1)
    assert "HTTP 500" in row.last_error
    assert clock() + 0.5 <= row.next_attempt_at <= clock() + 1.0  # backoff with jitter
    clock.advance(1.0)
    assert await engine.dispatcher.run_once() == 1
    first, second = hooks.requests("/flaky")
    assert (
        first.headers["idempotency-key"] == second.headers["idempotency-key"] == row.idempotency_key
    )
    assert second.body == b"ping"
    assert second.headers["content-type"].startswith("text/plain")
    assert [(r.status, r.attempts) for r in await engine.store.list_outbox()] == [("delivered", 2)]


@pytest.mark.parametrize("status", [408, 425, 429, 503])
async def test_statuses_worth_retrying_keep_the_effect_pending(
    open_engine: Any, hooks: Receiver, clock: Any, status: int
) -> None:
    hooks.script["/busy"] = [status]
    engine = await open_engine(webhook_allow=[hooks.allow], clock=clock, background=False)
    tx, _ = await _post(engine, {"url": hooks.url("/busy"), "json": 1})
    await engine.commit(tx)
    (row,) = await engine.store.list_outbox()
    assert row.status == "pending"
    assert f"HTTP {status}" in row.last_error


async def test_400_is_dead_lettered_at_once_with_the_answer(
    open_engine: Any, hooks: Receiver, clock: Any
) -> None:
    hooks.script["/bad"] = [400]
    engine = await open_engine(webhook_allow=[hooks.allow], clock=clock, background=False)
    tx, _ = await _post(engine, {"url": hooks.url("/bad?token=s3cret"), "json": {"x": 1}})
    c = await engine.commit(tx)
    assert c.effects_dispatched == 0
    (row,) = await engine.store.list_outbox()
    assert (row.status, row.attempts) == ("dead", 1)
    assert row.last_error == f"HTTP 400 from {hooks.url('/bad')}: status 400"  # no query
    clock.advance(3600)
    assert await engine.dispatcher.run_once() == 0  # dead: never tried again by itself
    assert len(hooks.requests("/bad?token=s3cret")) == 1


async def test_a_redirect_inside_the_allow_list_is_followed_with_the_same_post(
    open_engine: Any, hooks: Receiver, clock: Any
) -> None:
    hooks.script["/old"] = [(308, {"Location": "/new"})]
    engine = await open_engine(webhook_allow=[hooks.allow], clock=clock, background=False)
    tx, _ = await _post(
        engine, {"url": hooks.url("/old"), "json": {"v": 2}, "idempotency_key": "m"}
    )
    assert (await engine.commit(tx)).effects_dispatched == 1
    old, new = hooks.requests()
    assert (old.path, new.path) == ("/old", "/new")
    assert new.body == old.body
    assert new.headers["idempotency-key"] == "m"


async def test_a_redirect_to_a_refused_address_is_dead_lettered_without_following(
    open_engine: Any, hooks: Receiver, clock: Any
) -> None:
    with http_receiver() as elsewhere:  # loopback too, but not allow-listed
        hooks.script["/metadata"] = [(302, {"Location": "http://169.254.169.254/latest/"})]
        hooks.script["/loop"] = [(307, {"Location": elsewhere.url("/internal")})]
        engine = await open_engine(webhook_allow=[hooks.allow], clock=clock, background=False)
        a, _ = await _post(engine, {"url": hooks.url("/metadata"), "json": 1})
        b, _ = await _post(engine, {"url": hooks.url("/loop"), "json": 1})
        await engine.commit(a)
        await engine.commit(b)
        rows = await engine.store.list_outbox()
        assert [r.status for r in rows] == ["dead", "dead"]
        assert "169.254.169.254 is a link-local (cloud metadata) address" in rows[0].last_error
        assert f"--webhook-allow {elsewhere.allow}" in rows[1].last_error
        assert elsewhere.requests() == []  # the refused redirect was never followed


REFUSED = [
    ("http://127.0.0.1:{port}/x", "127.0.0.1 is a loopback address"),
    ("http://10.0.0.1/hook", "10.0.0.1 is a private address"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://[::1]:{port}/x", "::1 is a loopback address"),
    # IPv4 inside IPv6: the IPv4-compatible form and NAT64's well-known prefix, around the
    # loopback address the receiver listens on.
    ("http://[::127.0.0.1]:{port}/x", "embeds 127.0.0.1 (IPv4-compatible), a loopback"),
    ("http://[64:ff9b::7f00:1]:{port}/x", "embeds 127.0.0.1 (NAT64), a loopback"),
    ("http://[fe80::5efe:169.254.169.254]/latest/", "embeds 169.254.169.254 (ISATAP)"),
    ("http://localhost:{port}/x", "localhost names this machine"),
]


@pytest.mark.parametrize(("url", "said"), REFUSED)
async def test_the_guard_refuses_internal_targets_at_the_step(
    engine: agenttx.Engine, hooks: Receiver, url: str, said: str
) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "webhook.post", {"url": url.format(port=hooks.port)})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert said in r.clean_hint
    assert "--webhook-allow" in r.clean_hint
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    await engine.commit(tx)
    assert await engine.store.list_outbox() == []  # nothing was staged
    assert hooks.requests() == []  # and nothing connected


@pytest.mark.parametrize(("url", "said"), REFUSED)
async def test_the_guard_refuses_them_again_at_delivery(
    hooks: Receiver, url: str, said: str
) -> None:
    # An effect that reached the outbox some other way (a user tool staging on the
    # channel directly) meets the same guard, before any connection.
    channel = WebhookChannel(OutboundGuard())
    with pytest.raises(PermanentDeliveryError, match=re.escape(said)):
        await channel.deliver(_effect({"url": url.format(port=hooks.port), "json": 1}))
    await channel.aclose()
    assert hooks.requests() == []


async def test_delivery_connects_to_the_address_it_checked(hooks: Receiver) -> None:
    """A name is resolved once, checked, and the request goes to that address (Host keeps
    the name): no second lookup a rebinding DNS server could answer differently."""
    lookups: list[str] = []

    async def dns(host: str, port: int) -> list[str]:
        lookups.append(host)
        return {
            "hooks.example.com": ["127.0.0.1"],
            "mixed.example.com": ["93.184.216.34", "127.0.0.1"],
        }[host]

    guard = OutboundGuard([f"hooks.example.com:{hooks.port}"], resolver=dns)
    channel = WebhookChannel(guard)
    await channel.deliver(_effect({"url": f"http://hooks.example.com:{hooks.port}/in", "json": 1}))
    (seen,) = hooks.requests()
    assert seen.headers["host"] == f"hooks.example.com:{hooks.port}"
    assert lookups == ["hooks.example.com"]
    # Every address a name resolves to is checked: one private answer refuses the target.
    with pytest.raises(PermanentDeliveryError, match=r"mixed.example.com \(127.0.0.1\)"):
        await channel.deliver(
            _effect({"url": f"http://mixed.example.com:{hooks.port}/", "json": 1})
        )
    await channel.aclose()
    assert len(hooks.requests()) == 1


def test_signature_is_the_documented_hmac() -> None:
    body = b'{"a":1}'
    mac = hmac.new(b"k", b"1700000000.key-1." + body, hashlib.sha256).hexdigest()
    assert signature(b"k", 1_700_000_000, "key-1", body) == f"t=1700000000,v1={mac}"


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"url": "ftp://example.com/x"}, "must start with http:// or https://"),
        ({"url": "https://user:pw@example.com/"}, "holds credentials"),
        ({"url": "https://example.com/", "json": {}, "body": "x"}, "not both"),
        (
            {"url": "https://example.com/", "headers": {"Idempotency-Key": "x"}},
            "set by the delivery",
        ),
        ({"url": "https://example.com/", "headers": {"X-A": "a\r\nX-B: b"}}, "line break"),
        ({"url": "https://example.com/" + "a" * 9000}, "over the limit of 8192"),
    ],
)
async def test_bad_webhook_arguments_fail_the_step(
    engine: agenttx.Engine, arguments: dict[str, Any], said: str
) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "webhook.post", arguments)
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert said in r.clean_hint


def _effect(payload: Any, key: str = "k-1") -> Effect:
    return Effect(
        id=1,
        tx_id="tx-1",
        step_id=1,
        channel="webhook.post",
        payload=payload,
        idempotency_key=key,
        attempt=1,
        committed_at=1_700_000_000.0,
    )


async def test_a_redirect_to_another_origin_drops_the_agent_s_headers(
    open_engine: Any, hooks: Receiver, clock: Any
) -> None:
    with http_receiver() as other:
        hooks.script["/moved"] = [(307, {"Location": other.url("/here")})]
        engine = await open_engine(
            webhook_allow=[hooks.allow, other.allow], clock=clock, background=False
        )
        tx, _ = await _post(
            engine,
            {
                "url": hooks.url("/moved"),
                "json": {"a": 1},
                "headers": {"Authorization": "Bearer t0ken", "Content-Type": "application/x+json"},
                "idempotency_key": "x-origin",
            },
        )
        assert (await engine.commit(tx)).effects_dispatched == 1
        (first,) = hooks.requests()
        (second,) = other.requests()
    assert first.headers["authorization"] == "Bearer t0ken"
    assert "authorization" not in second.headers  # meant for the first origin only
    assert second.headers["idempotency-key"] == "x-origin"
    assert second.headers["content-type"] == "application/x+json"
    assert second.body == first.body


async def test_an_international_name_is_sent_in_its_idna_form(hooks: Receiver) -> None:
    async def dns(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    guard = OutboundGuard([f"bücher.example:{hooks.port}"], resolver=dns)
    channel = WebhookChannel(guard)
    await channel.deliver(_effect({"url": f"http://bücher.example:{hooks.port}/", "json": 1}))
    await channel.aclose()
    (seen,) = hooks.requests()
    assert seen.headers["host"] == f"xn--bcher-kva.example:{hooks.port}"
