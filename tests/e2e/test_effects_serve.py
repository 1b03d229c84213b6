"""The effect settings of ``agenttx serve``: --webhook-allow and AGENTTX_WEBHOOK_SECRET reach
the delivery (a real HTTP receiver gets a signed request), and settings that cannot work
stop the start with exit status 1 and what to do."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest
from click.testing import CliRunner

from agenttx.cli import main
from agenttx.client import AgentTxClient
from http_receiver import http_receiver
from server_process import start_server


def test_serve_delivers_a_signed_webhook_to_an_allowed_target(tmp_path: Path) -> None:
    with http_receiver() as hooks:
        server = start_server(
            tmp_path / "data",
            "--webhook-allow",
            hooks.allow,
            "--metrics-addr",
            "off",
            env={"AGENTTX_WEBHOOK_SECRET": "s3cret"},
        )
        with server.killed_on_error(), AgentTxClient(server.address, timeout=30) as client:
            tx = client.begin().transaction_id
            r = client.execute_step(
                tx,
                1,
                "webhook.post",
                {"url": hooks.url("/in"), "body": "hi", "idempotency_key": "k"},
            )
            assert r.status.value == "SUCCESS"
            assert client.commit(tx).effects_dispatched == 1
            refused = client.execute_step(
                client.begin().transaction_id, 1, "webhook.post", {"url": "http://10.0.0.1/"}
            )
            assert "10.0.0.1 is a private address" in refused.clean_hint
        assert server.terminate() == 0
    (seen,) = hooks.requests()
    t, v1 = (p.split("=", 1)[1] for p in seen.headers["x-agenttx-signature"].split(","))
    assert v1 == hmac.new(b"s3cret", f"{t}.k.hi".encode(), hashlib.sha256).hexdigest()
    assert "s3cret" not in server.log_text()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--smtp-url", "smtp://127.0.0.1:2525"], "--smtp-url needs --smtp-from"),
        (["--smtp-url", "http://mail", "--smtp-from", "a@example.com"], "smtp://host:port"),
        (["--webhook-allow", "host:99999"], "the port must be 1..65535"),
    ],
)
def test_effect_settings_that_cannot_work_stop_the_start(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    result = CliRunner().invoke(
        main,
        [
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen-addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "off",
            *flags,
        ],
        env={"AGENTTX_SMTP_USERNAME": "", "AGENTTX_SMTP_PASSWORD": ""},
    )
    assert result.exit_code == 1, result.output
    assert said in result.output
