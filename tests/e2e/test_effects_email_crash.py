"""The at-least-once window of email, end to end: ``agenttx serve`` SIGKILLed while a
committed mail is mid-delivery (the SMTP server has the message, the sender never got its
answer) sends it again after the restart, with the same Message-ID, so a receiver that drops
an id it has already seen keeps exactly one mail per committed effect — and none of a
rolled-back transaction, before or after the crash."""

from __future__ import annotations

import threading
from pathlib import Path

from agenttx.client import AgentTxClient
from agenttx.effects.smtp import message_id
from mail_sink import mail_sink
from server_process import start_server

SENDER = "agent@example.com"


def _mail(client: AgentTxClient, key: str) -> str:
    tx = client.begin().transaction_id
    r = client.execute_step(
        tx,
        1,
        "email.send",
        {"to": f"{key}@example.com", "subject": key, "body": "b", "idempotency_key": key},
    )
    assert r.status.value == "SUCCESS", r
    return tx


def test_a_mail_mid_delivery_when_the_server_is_killed_is_sent_again_with_its_message_id(
    tmp_path: Path,
) -> None:
    with mail_sink() as sink:
        flags = ("--smtp-url", sink.url, "--smtp-from", SENDER, "--metrics-addr", "off")
        server = start_server(tmp_path / "data", *flags)
        with server.killed_on_error():
            with AgentTxClient(server.address, timeout=30) as client:
                dropped = _mail(client, "dropped")
                client.rollback(dropped)
                kept = _mail(client, "kept")
                sink.hold()  # the SMTP server takes DATA and then does not answer
                commit = threading.Thread(target=_commit_and_lose_the_reply, args=(client, kept))
                commit.start()
                sink.wait_for(1)  # the message is on the SMTP server: mid-delivery
            server.kill()  # SIGKILL: the outbox row is still `delivering`
            commit.join(30)
        sink.release()

        server = start_server(tmp_path / "data", *flags)
        with server.killed_on_error():
            # The restarted server (alone on its SQLite file) releases the dead claim and
            # delivers at once, not after the 30 s lease.
            copies = sink.wait_for(2)
            with AgentTxClient(server.address, timeout=30) as client:
                after = _mail(client, "after")
                assert client.commit(after).effects_dispatched == 1
                again = _mail(client, "dropped2")
                client.rollback(again)
            received = sink.wait_for(3)
            assert server.terminate() == 0

    kept_id = message_id("default", "kept", SENDER)
    assert [m.message_id for m in copies[:2]] == [kept_id, kept_id]  # at least once: twice
    by_id = {m.message_id: m for m in received}  # what a deduplicating receiver keeps
    assert sorted(m["Subject"] for m in (r.message for r in by_id.values())) == ["after", "kept"]
    assert len(received) == 3  # nothing else arrived: no rolled-back mail, no third copy


def _commit_and_lose_the_reply(client: AgentTxClient, tx: str) -> None:
    try:
        client.commit(tx)
    except Exception:
        pass  # the server was killed under the call: the reply is lost, the commit is not
