"""email.send: staged with its step, sent over SMTP (a real aiosmtpd server) once after a
durable commit, never for a rolled-back transaction; SMTP replies decide retry or dead letter;
the Message-ID derives from the idempotency key, so a repeat after a crash is recognisable."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import agenttx
from agenttx.effects.smtp import SmtpSettings, message_id
from agenttx.types import StepStatus
from mail_sink import MailSink, mail_sink

SENDER = "agent@example.com"


@pytest.fixture
def sink() -> Iterator[MailSink]:
    with mail_sink() as s:
        yield s


def smtp(sink: MailSink) -> SmtpSettings:
    return SmtpSettings.from_url(sink.url, SENDER, env={}, timeout_s=10)


async def test_a_committed_mail_arrives_once_and_a_rolled_back_one_never(
    open_engine: Any, sink: MailSink
) -> None:
    engine = await open_engine(smtp=smtp(sink))
    kept = (await engine.begin()).transaction_id
    r = await engine.execute_step(
        kept,
        1,
        "email.send",
        {
            "to": ["ann@example.com"],
            "cc": "cy@example.com",
            "bcc": ["bo@example.com"],
            "subject": "Refund issued",
            "body": "Order 1042 was refunded.",
            "html": "<p>Order <b>1042</b> was refunded.</p>",
            "idempotency_key": "refund-1042",
        },
    )
    assert r.status is StepStatus.SUCCESS
    assert r.output == {
        "staged": True,
        "channel": "email.send",
        "idempotency_key": "refund-1042",
        "recipients": 3,
    }
    dropped = (await engine.begin()).transaction_id
    await engine.execute_step(
        dropped, 1, "email.send", {"to": "x@example.com", "subject": "no", "body": "never"}
    )
    assert sink.messages() == []  # staged, not sent
    await engine.rollback(dropped)
    c = await engine.commit(kept)
    assert (c.effects_dispatched, c.dispatch_errors) == (1, [])

    (mail,) = sink.messages()
    assert mail.mail_from == SENDER
    assert sorted(mail.rcpt_tos) == ["ann@example.com", "bo@example.com", "cy@example.com"]
    m = mail.message
    assert (m["From"], m["To"], m["Cc"], m["Subject"]) == (
        SENDER,
        "ann@example.com",
        "cy@example.com",
        "Refund issued",
    )
    assert m["Bcc"] is None  # the envelope only
    assert mail.message_id == message_id("default", "refund-1042", SENDER)
    assert m["X-AgentTx-Transaction"] == kept
    parts = {
        p.get_content_type(): p.get_payload(decode=True).decode()
        for p in m.walk()
        if not p.is_multipart()
    }
    assert parts["text/plain"].strip() == "Order 1042 was refunded."
    assert "<b>1042</b>" in parts["text/html"]
    # Delivered rows stay delivered: the background pass does not send it again.
    assert await engine.dispatcher.run_once() == 0
    assert len(sink.messages()) == 1


async def test_the_message_id_is_the_same_for_every_attempt_of_one_key(
    open_engine: Any, sink: MailSink, clock: Any
) -> None:
    sink.refuse_rcpt["ann@example.com"] = "451 4.3.0 try again later"
    engine = await open_engine(smtp=smtp(sink), clock=clock, background=False)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(
        tx,
        1,
        "email.send",
        {"to": ["ann@example.com", "bo@example.com"], "subject": "s", "body": "b"},
    )
    c = await engine.commit(tx)
    assert c.effects_dispatched == 1  # bo accepted it; ann's 451 is the server's to retry
    (first,) = sink.messages()
    # The key was made for the step; its Message-ID is what a receiver deduplicates on.
    (row,) = await engine.store.list_outbox()
    assert first.message_id == message_id("default", row.idempotency_key, SENDER)


async def test_a_permanent_smtp_refusal_dead_letters_with_the_server_s_words(
    open_engine: Any, sink: MailSink, clock: Any
) -> None:
    sink.refuse_rcpt["gone@example.com"] = "550 5.1.1 no such mailbox"
    engine = await open_engine(smtp=smtp(sink), clock=clock, background=False)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(
        tx, 1, "email.send", {"to": "gone@example.com", "subject": "s", "body": "b"}
    )
    c = await engine.commit(tx)
    assert c.effects_dispatched == 0
    assert "550" in c.dispatch_errors[0]
    assert "no such mailbox" in c.dispatch_errors[0]
    (row,) = await engine.store.list_outbox()
    assert (row.status, row.attempts) == ("dead", 1)
    assert sink.messages() == []


async def test_a_temporary_refusal_is_retried_until_the_server_takes_it(
    open_engine: Any, sink: MailSink, clock: Any
) -> None:
    sink.refuse_rcpt["ann@example.com"] = "452 4.2.2 mailbox full"
    engine = await open_engine(
        smtp=smtp(sink), clock=clock, background=False, dispatch_backoff_s=1.0
    )
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(
        tx, 1, "email.send", {"to": "ann@example.com", "subject": "s", "body": "b"}
    )
    c = await engine.commit(tx)
    assert "452" in c.dispatch_errors[0]
    (row,) = await engine.store.list_outbox()
    assert row.status == "pending"
    # The SMTP channel asks for jitter: the retry is due within 50..100 % of the backoff.
    assert clock() + 0.5 <= row.next_attempt_at <= clock() + 1.0
    del sink.refuse_rcpt["ann@example.com"]
    clock.advance(1.0)
    assert await engine.dispatcher.run_once() == 1
    assert [m.rcpt_tos for m in sink.messages()] == [["ann@example.com"]]
    assert [r.status for r in await engine.store.list_outbox()] == ["delivered"]


async def test_an_unreachable_server_keeps_the_mail_queued(open_engine: Any, clock: Any) -> None:
    from server_process import free_port

    settings = SmtpSettings.from_url(f"smtp://127.0.0.1:{free_port()}", SENDER, env={}, timeout_s=2)
    engine = await open_engine(smtp=settings, clock=clock, background=False)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(
        tx, 1, "email.send", {"to": "a@example.com", "subject": "s", "body": "b"}
    )
    c = await engine.commit(tx)
    assert c.effects_dispatched == 0
    assert c.dispatch_errors
    (row,) = await engine.store.list_outbox()
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.last_error


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"to": "not-an-address", "subject": "s", "body": "b"}, "invalid address"),
        ({"to": "a@example.com\r\nBcc: x@evil.com", "subject": "s", "body": "b"}, "invalid"),
        ({"to": "a@example.com", "subject": "two\nlines", "body": "b"}, "one line"),
        ({"to": [], "subject": "s", "body": "b"}, "at least one address"),
        ({"to": "a@example.com", "subject": "s"}, "body is missing"),
        ({"to": ["a@example.com"] * 101, "subject": "s", "body": "b"}, "over the limit of 100"),
        ({"to": "a@example.com", "subject": "s" * 999, "body": "b"}, "over the limit of 998"),
    ],
)
async def test_bad_mail_arguments_fail_the_step_and_stage_nothing(
    engine: agenttx.Engine, arguments: dict[str, Any], said: str
) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "email.send", arguments)
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert said in r.clean_hint
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    await engine.commit(tx)
    assert await engine.store.list_outbox() == []


def test_smtp_settings_refuse_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="smtp://host:port"):
        SmtpSettings.from_url("http://mail:25", SENDER, env={})
    with pytest.raises(ValueError, match="AGENTTX_SMTP_USERNAME"):
        SmtpSettings.from_url("smtp://u:p@mail:25", SENDER, env={})
    with pytest.raises(ValueError, match="both"):
        SmtpSettings.from_url("smtp://mail", SENDER, env={"AGENTTX_SMTP_USERNAME": "u"})
    with pytest.raises(ValueError, match="--smtp-from"):
        SmtpSettings.from_url("smtp://mail", "nobody", env={})
    s = SmtpSettings.from_url(
        "smtps://mail.example.com",
        SENDER,
        env={"AGENTTX_SMTP_USERNAME": "u", "AGENTTX_SMTP_PASSWORD": "hunter2"},
    )
    assert (s.port, s.implicit_tls, s.username) == (465, True, "u")
    assert "hunter2" not in repr(s)
    assert SmtpSettings.from_url("smtp://mail", SENDER, env={}).port == 25
