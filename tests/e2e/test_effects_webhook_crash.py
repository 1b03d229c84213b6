"""The at-least-once window of webhooks, end to end: ``agenttx serve`` SIGKILLed while a
committed webhook is mid-delivery (the receiver has the request, the sender never got the
answer) sends it again after the restart with the same Idempotency-Key, which is how the
receiver knows it is the same delivery; a rolled-back transaction's webhook never arrives."""

from __future__ import annotations

import threading
from pathlib import Path

from agenttx.client import AgentTxClient
from http_receiver import http_receiver
from server_process import start_server


def _hook(client: AgentTxClient, url: str, key: str) -> str:
    tx = client.begin().transaction_id
    r = client.execute_step(
        tx, 1, "webhook.post", {"url": url, "json": {"k": key}, "idempotency_key": key}
    )
    assert r.status.value == "SUCCESS", r
    return tx


def test_a_webhook_mid_delivery_when_the_server_is_killed_is_sent_again_with_its_key(
    tmp_path: Path,
) -> None:
    with http_receiver() as hooks:
        flags = ("--webhook-allow", hooks.allow, "--metrics-addr", "off")
        server = start_server(tmp_path / "data", *flags)
        with server.killed_on_error():
            with AgentTxClient(server.address, timeout=30) as client:
                client.rollback(_hook(client, hooks.url("/in"), "dropped"))
                kept = _hook(client, hooks.url("/in"), "kept")
                hooks.hold()  # the receiver takes the request and does not answer yet
                commit = threading.Thread(target=_commit_and_lose_the_reply, args=(client, kept))
                commit.start()
                hooks.wait_for(1)
            server.kill()  # SIGKILL mid-delivery: the outbox row is still `delivering`
            commit.join(30)
        hooks.release()

        server = start_server(tmp_path / "data", *flags)
        with server.killed_on_error():
            seen = hooks.wait_for(2)
            assert server.terminate() == 0
    keys = [s.headers["idempotency-key"] for s in seen]
    assert keys == ["kept", "kept"]  # at least once, and the receiver can tell it is one
    assert len(hooks.requests()) == 2  # nothing of the rolled-back transaction


def _commit_and_lose_the_reply(client: AgentTxClient, tx: str) -> None:
    try:
        client.commit(tx)
    except Exception:
        pass  # the server was killed under the call: the reply is lost, the commit is not
