"""``--json`` prints the reply the server sent: the CLI is a client (``AgentTxClient``) and
prints from the results it returns, so its JSON is that result built back into the wire reply.
Each check reads the same reply over a plain generated stub — a read of the same state, or a
stored reply fetched again with the same request id — and compares them field by field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from agenttx.cli import main
from agenttx.cli.common import to_dict
from agenttx.client._wire import CLIENT_METADATA
from agenttx.wire import agenttx_pb2 as pb
from server_process import ServerProcess, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("clijson") / "data")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0, proc.log_text()


def cli_json(server: ServerProcess, *args: str) -> Any:
    done = CliRunner().invoke(main, [*args, "--json"], env={"AGENTTX_SERVER": server.address})
    assert done.exit_code in (0, 3), done.output  # 3: `tx step` ran a step that failed
    return json.loads(done.output)


def wire(server: ServerProcess, method: str, request: Any) -> Any:
    """The reply of ``method`` over a plain stub, sent what the CLI sends (RETRY by name)."""
    with server.channel() as channel:
        return getattr(server.stub(channel), method)(request, metadata=CLIENT_METADATA)


def test_each_commands_json_is_the_servers_reply(server: ServerProcess) -> None:
    tx = cli_json(server, "tx", "begin", "--agent", "json-check", "--label", "j")["transaction_id"]

    def step(step_id: int, tool: str, args: dict[str, Any], rid: str, *more: str) -> Any:
        printed = cli_json(
            server, "tx", "step", tx, str(step_id), tool, json.dumps(args), *more,
            *(("--request-id", rid) if rid else ()),
        )  # fmt: skip
        request = pb.ExecuteStepRequest(
            transaction_id=tx,
            step_id=step_id,
            tool_name=tool,
            arguments_json=json.dumps(args),
            request_id=rid,
            dry_run="--dry-run" in more,
        )
        assert printed == to_dict(wire(server, "ExecuteStep", request))
        return printed

    step(1, "kv.put", {"key": "customer", "value": "c-404"}, "s1")
    # A dry run journals nothing: the same call again gives the same report.
    dry = step(2, "kv.put", {"key": "limit", "value": 5}, "", "--dry-run")
    assert dry["fidelity"]
    assert dry["dry_run"]["would_succeed"] is True
    # A reference to a customer that does not exist: the step fails and the server rewinds.
    invoice = {
        "table": "invoices",
        "id": "inv-1",
        "fields": {"customer_id": "${steps.1.value}"},
        "references": {"customer_id": "customers"},
    }
    failed = step(2, "record.insert", invoice, "s2")
    assert failed["status"] == "STEP_STATUS_ROLLBACK_TRIGGERED"
    assert failed["clean_hint"]

    shown = cli_json(server, "tx", "show", tx)
    assert shown == to_dict(
        wire(server, "GetTransaction", pb.GetTransactionRequest(transaction_id=tx))
    )
    assert len(shown["steps"]) == 2
    assert shown["decisions"]

    listed = cli_json(server, "tx", "list", "--agent", "json-check")
    reply = wire(server, "ListTransactions", pb.ListTransactionsRequest(agent_id="json-check"))
    assert listed == [to_dict(t) for t in reply.transactions]

    tools = cli_json(server, "tools")
    assert tools == [to_dict(t) for t in wire(server, "ListTools", pb.ListToolsRequest()).tools]

    nxt = shown["next_step_id"]
    step(nxt, "kv.put", {"key": "customer", "value": "c-1"}, "s3")
    committed = cli_json(server, "tx", "commit", tx, "--request-id", "c1")
    again = wire(
        server, "CommitTransaction", pb.CommitTransactionRequest(transaction_id=tx, request_id="c1")
    )
    assert committed == to_dict(again)
    assert committed["transaction_status"] == "COMMITTED"
