"""A built-in's own argument check — a webhook target the outbound guard refuses, a bad mail
address, ``json`` and ``body`` together — is the step's own fault: the controller retries that
step (RETRY, ``next_step_id`` = the step) and undoes nothing before it, as for a schema
refusal. Before, such a failure at step K backtracked to K−1 and dropped that step's writes.
Both stores."""

from __future__ import annotations

from typing import Any

import pytest

import agenttx
from agenttx import StepStatus, Strategy

REFUSED_AT_THE_STEP = [
    ("webhook.post", {"url": "http://10.0.0.1/hook"}, "10.0.0.1 is a private address"),
    ("webhook.post", {"url": "http://localhost:8080/x"}, "localhost names this machine"),
    ("webhook.post", {"url": "http://169.254.169.254/latest/"}, "cloud metadata"),
    ("webhook.post", {"url": "ftp://example.com/x"}, "must start with http:// or https://"),
    ("webhook.post", {"url": "https://example.com/", "json": 1, "body": "x"}, "not both"),
    (
        "webhook.post",
        {"url": "https://example.com/", "headers": {"Idempotency-Key": "x"}},
        "set by the delivery",
    ),
    ("email.send", {"to": "not an address", "subject": "s", "body": "b"}, "invalid address"),
    ("email.send", {"to": "a@example.com", "subject": "a\nb", "body": "b"}, "one line"),
]


@pytest.mark.parametrize(("tool", "arguments", "said"), REFUSED_AT_THE_STEP)
async def test_a_refused_argument_retries_its_step_and_keeps_the_earlier_ones(
    engine: agenttx.Engine, tool: str, arguments: dict[str, Any], said: str
) -> None:
    tx = (await engine.begin()).transaction_id
    first = await engine.execute_step(tx, 1, "kv.put", {"key": "done", "value": "step 1"})
    assert first.status is StepStatus.SUCCESS

    refused = await engine.execute_step(tx, 2, tool, arguments)
    assert refused.status is StepStatus.ROLLBACK_TRIGGERED
    assert said in refused.clean_hint
    assert refused.strategy is Strategy.RETRY
    assert (refused.rollback_to_step, refused.next_step_id) == (2, 2)

    # Step 1 was not undone: its write is still there for step 2 to read, and commits.
    read = await engine.execute_step(tx, 2, "kv.get", {"key": "done"})
    assert read.status is StepStatus.SUCCESS
    assert read.output["value"] == "step 1"
    done = await engine.commit(tx)
    assert done.steps_committed == 2
    assert await engine.store.list_outbox() == []  # the refused call staged nothing
