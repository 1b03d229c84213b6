"""Compensation (``cases.COMPENSATION``) on every surface, as ``test_lifecycle.py`` runs the
lifecycle: a compensating transaction, a rollback or an abort that waits for an approver, the
approver's decision and its refusals, with the undos each ran; and what a person reads of
them in the CLI's own words (its text, not its ``--json``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import Result

from compensation_tools import undone
from http_harness import assert_error_shape, request
from surfaces.cases import (
    BEGIN,
    CHARGE_REFUND,
    COMMIT,
    COMPENSATE,
    COMPENSATION,
    MCP_SURFACES,
    REFUSED,
    WAITING_REFUSAL,
    WAITING_ROLLBACK,
    WHY,
    comp_step,
)
from surfaces.drivers import Driver
from surfaces.runner import conformance_test, made_one, prepared

pytestmark = pytest.mark.asyncio(loop_scope="module")

test_each_surface_gives_the_engines_outcome = conformance_test(COMPENSATION)


# -- each surface's own form: the CLI's text, MCP's tool declaration, /v1's document -------------


async def as_a_person_runs_it(drivers: dict[str, Driver], *argv: str) -> Result:
    return await drivers["cli"].as_a_person_runs_it(*argv)  # type: ignore[attr-defined, no-any-return]


def words(r: Result) -> str:
    return " ".join(r.output.split())  # rich wraps at the terminal's width


async def test_the_cli_says_what_a_compensation_will_undo_and_did(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    bound = await prepared((*CHARGE_REFUND, COMMIT), drivers["cli"], tmp_path / "s")
    preview = await as_a_person_runs_it(drivers, "tx", "compensate", bound["tx"], "--preview")
    assert preview.exit_code == 0, preview.output
    assert "step 2 comp.refund" in words(preview)
    assert "awaiting_approval" in words(preview)
    assert undone(bound["log"]) == []
    await made_one(COMPENSATE, drivers["cli"], bound)
    ok = await as_a_person_runs_it(
        drivers, "tx", "approve-compensation", bound["compensation"],
        "--principal", "alice", "--role", "approver",
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert "COMPENSATED" in ok.output
    assert undone(bound["log"]) == [("comp.refund", 2), ("comp.charge", 1)]


async def test_the_cli_exits_1_when_a_compensation_leaves_a_step_not_undone(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    bound = await prepared(
        (BEGIN, comp_step(1, "comp.launch"), COMMIT), drivers["cli"], tmp_path / "s"
    )
    r = await as_a_person_runs_it(drivers, "tx", "compensate", bound["tx"], "--reason", "r")
    assert r.exit_code == 1, r.output
    assert "not undone" in words(r)
    assert "rollback_not_supported" in words(r)


async def test_the_cli_says_a_rollback_waits_for_an_approver(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    bound = await prepared((BEGIN, comp_step(1, "comp.refund")), drivers["cli"], tmp_path / "s")
    r = await as_a_person_runs_it(drivers, "tx", "rollback", bound["tx"])
    assert r.exit_code == 0, r.output
    assert "waits for an approver" in words(r)
    assert "approve-compensation" in words(r)
    assert undone(bound["log"]) == []


async def test_the_cli_refuses_a_compensation_in_words(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    bound = await prepared(WAITING_REFUSAL, drivers["cli"], tmp_path / "s")
    refuse = ("tx", "refuse-compensation", bound["compensation"], "--principal", "alice")
    missing = await as_a_person_runs_it(drivers, *refuse)
    assert missing.exit_code == 2  # click: --reason is required
    assert undone(bound["log"]) == []
    ok = await as_a_person_runs_it(drivers, *refuse, "--role", "approver", "--reason", WHY)
    assert ok.exit_code == 0, ok.output
    assert "refused" in words(ok)
    assert "FAILED" in words(ok)
    assert REFUSED in words(ok)
    assert undone(bound["log"]) == [("comp.charge", 1)]


async def test_mcp_declares_who_refuses_a_compensation_and_why(
    drivers: dict[str, Driver],
) -> None:
    for surface in MCP_SURFACES:
        session = drivers[surface].session  # type: ignore[attr-defined]
        tools = {t.name: t for t in (await session.list_tools()).tools}
        refuse = tools["refuse_compensation"]
        assert set(refuse.input_schema["required"]) == {"transaction_id", "principal", "reason"}
        assert "approver" in (refuse.description or ""), surface
        assert {"compensate_transaction", "approve_compensation"} <= set(tools), surface


async def test_v1_documents_refuse_compensation(drivers: dict[str, Driver]) -> None:
    base = drivers["http"].base  # type: ignore[attr-defined]
    doc = (await asyncio.to_thread(request, base, "GET", "/openapi.json")).json
    op = doc["paths"]["/v1/transactions/{transaction_id}/refuse-compensation"]["post"]
    assert op["operationId"] == "RefuseCompensation"


async def test_a_refusal_without_its_reason_is_refused_where_the_request_is_read(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    # The table sends a blank reason (the CLI's --reason needs a value); a request with no
    # reason at all is refused by /v1's document and MCP's input schema.
    bound = await prepared(WAITING_ROLLBACK, drivers["http"], tmp_path / "http")
    base = drivers["http"].base  # type: ignore[attr-defined]
    path = f"/v1/transactions/{bound['tx']}/refuse-compensation"
    reply = await asyncio.to_thread(request, base, "POST", path, {"principal": "alice"})
    assert_error_shape(reply, 400)
    bound = await prepared(WAITING_ROLLBACK, drivers["mcp-stdio"], tmp_path / "mcp")
    session = drivers["mcp-stdio"].session  # type: ignore[attr-defined]
    arguments = {"transaction_id": bound["tx"], "principal": "alice", "roles": ["approver"]}
    refused = await session.call_tool("refuse_compensation", arguments)
    assert refused.is_error
    assert "reason" in json.dumps(refused.structured_content) + str(refused.content)
    assert undone(bound["log"]) == []
