"""A whole transaction from a shell against a real ``agenttx serve``: ``agenttx tx begin``,
``tx step`` (and its ``--dry-run``: the fidelity reached and what would change, nothing
journaled) and ``tx commit`` (with a receipt and the echoed revision), what each prints, its
JSON, its exit status, and its refusals with the command to run next."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agenttx.auth.keys import hash_secret, new_secret
from agenttx.cli import main
from agenttx.cli.common import to_dict
from agenttx.client._wire import CLIENT_METADATA
from agenttx.wire import agenttx_pb2 as pb
from conftest import FakeClock
from psp import TOOLS, PaymentProvider
from server_process import ServerProcess, ServerThread, start_server

WIDE = {"COLUMNS": "240"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("clistep") / "data")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0, proc.log_text()


def agenttx(
    server: ServerProcess | ServerThread,
    *args: str,
    stdin: str | None = None,
    key: str | None = None,
) -> Result:
    address = server.address if isinstance(server, ServerProcess) else server.target
    env = {**WIDE, "AGENTTX_SERVER": address, "AGENTTX_API_KEY": key}
    return CliRunner().invoke(main, list(args), input=stdin, env=env)


def begin(server: ServerProcess, *args: str) -> str:
    began = agenttx(server, "tx", "begin", "--json", *args)
    assert began.exit_code == 0, began.output
    return str(json.loads(began.output)["transaction_id"])


def read(server: ServerProcess, tx: str) -> Any:
    with server.channel() as channel:
        return server.stub(channel).GetTransaction(pb.GetTransactionRequest(transaction_id=tx))


def test_a_transaction_begun_stepped_and_committed_from_the_shell(server: ServerProcess) -> None:
    began = agenttx(server, "tx", "begin", "--agent", "shell", "--label", "by-hand")
    assert began.exit_code == 0, began.output
    tx = began.output.split()[1]
    assert tx.startswith("tx_")
    assert "mode transactional, revision 1, status ACTIVE" in began.output
    assert f"next: agenttx tx step {tx} 1 TOOL" in began.output

    step = agenttx(
        server,
        "tx",
        "step",
        tx,
        "1",
        "kv.put",
        '{"key": "shell/a", "value": 7}',
        "--raw-context",
        "store the answer",
    )
    assert step.exit_code == 0, step.output
    assert f"step 1 of {tx}: SUCCESS · transaction ACTIVE · revision 2" in step.output
    assert 'output {"key":"shell/a","value":7}' in step.output
    assert f"next: agenttx tx step {tx} 2 TOOL '{{...}}', or agenttx tx commit {tx} " in (
        step.output
    )
    assert "--expected-revision 2" in step.output
    # Arguments from standard input, and the JSON reply.
    second = agenttx(
        server, "tx", "step", tx, "2", "kv.get", "-", "--json", stdin='{"key": "shell/a"}'
    )
    assert second.exit_code == 0, second.output
    reply = json.loads(second.output)
    assert (reply["status"], reply["next_step_id"]) == ("STEP_STATUS_SUCCESS", 3)
    assert reply["output"]["value"] == 7

    done = agenttx(server, "tx", "commit", tx, "--expected-revision", str(reply["revision"]))
    assert done.exit_code == 0, done.output
    assert f"committed {tx}: 2 steps, status COMMITTED" in done.output
    t = read(server, tx)
    assert (t.status, t.agent_id) == ("COMMITTED", "shell")
    labelled = agenttx(server, "tx", "list", "--label", "by-hand", "--json")
    assert [x["transaction_id"] for x in json.loads(labelled.output)] == [tx]
    assert [c.raw_context for c in t.context] == ["store the answer", ""]

    # A later transaction reads what this one committed.
    reader = begin(server)
    got = agenttx(server, "tx", "step", reader, "1", "kv.get", '{"key": "shell/a"}', "--json")
    assert json.loads(got.output)["output"]["value"] == 7
    assert agenttx(server, "tx", "rollback", reader).exit_code == 0


def test_a_dry_run_shows_the_fidelity_and_the_change_and_journals_nothing(
    server: ServerProcess,
) -> None:
    tx = begin(server)
    dry = agenttx(
        server, "tx", "step", tx, "1", "kv.put", '{"key": "dry/k", "value": 1}', "--dry-run"
    )
    assert dry.exit_code == 0, dry.output
    assert f"dry run of step 1 of {tx} (kv.put): would succeed · fidelity full_simulation" in (
        dry.output
    )
    assert "policy allowed" in dry.output
    assert "write  kv/dry/k: (absent) → 1" in dry.output
    assert 'simulated output {"key":"dry/k","value":1}' in dry.output
    assert "nothing was journaled: step 1 is still next" in dry.output

    staged = agenttx(
        server,
        "tx",
        "step",
        tx,
        "1",
        "effect.stage",
        '{"channel": "file", "payload": {"to": "ops"}}',
        "--dry-run",
    )
    assert staged.exit_code == 0, staged.output
    assert "effect file key " in staged.output
    assert '{"to":"ops"}' in staged.output

    # A tool that declares schema_only: its arguments are checked, the tool does not run.
    schema = agenttx(
        server, "tx", "step", tx, "1", "test.call_api", '{"order": "o-1"}', "--dry-run", "--json"
    )
    assert schema.exit_code == 0, schema.output
    report = json.loads(schema.output)
    assert (report["fidelity"], report["policy_decision"]) == ("schema_only", "")
    assert report["dry_run"]["declared"] == "schema_only"
    assert report["dry_run"]["would_succeed"] is True
    assert report["next_step_id"] == 1
    shown = agenttx(server, "tx", "step", tx, "1", "test.call_api", '{"order": "o-1"}', "--dry-run")
    assert "the tool did not run at this fidelity" in shown.output

    # One that would fail: exit 3, the hint a real step would get, and still nothing kept.
    failing = agenttx(server, "tx", "step", tx, "1", "kv.put", "{}", "--dry-run")
    assert failing.exit_code == 3, failing.output
    assert "would fail" in failing.output
    assert "key" in failing.output
    t = read(server, tx)
    assert (t.status, t.next_step_id, t.revision, len(t.steps), list(t.constraints)) == (
        "ACTIVE",
        1,
        1,
        0,
        [],
    )
    assert agenttx(server, "tx", "rollback", tx).exit_code == 0


def test_a_failed_step_exits_3_with_its_hint_and_where_to_go_on(server: ServerProcess) -> None:
    tx = begin(server)
    failed = agenttx(server, "tx", "step", tx, "1", "kv.put", '{"value": 1}')
    assert failed.exit_code == 3, failed.output
    assert f"step 1 of {tx}: ROLLBACK_TRIGGERED" in failed.output
    assert "Hint:" in failed.output
    assert "send step 1 again" in failed.output
    assert f"next: agenttx tx step {tx} 1 " in failed.output
    as_json = agenttx(server, "tx", "step", tx, "1", "kv.put", '{"value": 1}', "--json")
    assert as_json.exit_code == 3
    assert json.loads(as_json.output)["status"] != "STEP_STATUS_SUCCESS"
    ok = agenttx(server, "tx", "step", tx, "1", "kv.put", '{"key": "k", "value": 1}')
    assert ok.exit_code == 0, ok.output
    assert agenttx(server, "tx", "rollback", tx).exit_code == 0


def test_a_retried_step_is_retry_on_the_cli_and_local_backtrack_to_a_reference_client(
    server: ServerProcess,
) -> None:
    """The CLI says it can name RETRY (as our client does), so the attempt `tx watch`, HTTP and
    MCP call RETRY is RETRY here too; a gRPC caller that says nothing (the reference's
    client) still gets LOCAL_BACKTRACK for the same attempt."""
    tx = begin(server)
    failed = agenttx(server, "tx", "step", tx, "1", "kv.put", '{"value": 1}')
    assert failed.exit_code == 3, failed.output
    assert "rolled back (retry): only step 1's own effects were undone; send step 1 again" in (
        failed.output
    )
    assert "local_backtrack" not in failed.output
    as_json = agenttx(server, "tx", "step", tx, "1", "kv.put", '{"value": 1}', "--json")
    assert as_json.exit_code == 3, as_json.output
    reply = json.loads(as_json.output)
    assert (reply["strategy"], reply["next_step_id"]) == ("ROLLBACK_STRATEGY_RETRY", 1)

    bare = begin(server)
    with server.channel() as channel:
        r = server.stub(channel).ExecuteStep(
            pb.ExecuteStepRequest(
                transaction_id=bare, step_id=1, tool_name="kv.put", arguments_json='{"value": 1}'
            )
        )
    assert r.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert (r.strategy, r.next_step_id) == (pb.ROLLBACK_STRATEGY_LOCAL_BACKTRACK, 1)
    for t in (tx, bare):
        assert agenttx(server, "tx", "rollback", t).exit_code == 0


def test_a_request_id_sent_again_returns_the_stored_reply(server: ServerProcess) -> None:
    tx = begin(server)
    args = ("tx", "step", tx, "1", "kv.put", '{"key": "rid/k", "value": 1}', "--json")
    first = agenttx(server, *args, "--request-id", "shell-1")
    again = agenttx(server, *args, "--request-id", "shell-1")
    assert first.exit_code == again.exit_code == 0, (first.output, again.output)
    assert json.loads(again.output) == json.loads(first.output)
    t = read(server, tx)
    assert (t.next_step_id, len(t.steps)) == (2, 1)  # the step ran once
    assert agenttx(server, "tx", "rollback", tx).exit_code == 0


def test_bad_arguments_are_refused_before_anything_is_sent(server: ServerProcess) -> None:
    tx = begin(server)
    for text, says in (
        ("{key: 1}", "not JSON"),
        ("[1, 2]", "a JSON object is needed"),
        ('"k"', "a JSON object is needed"),
    ):
        refused = agenttx(server, "tx", "step", tx, "1", "kv.put", text)
        assert refused.exit_code == 2, refused.output
        assert says in refused.output
        assert "ARGUMENTS_JSON" in refused.output
    both = agenttx(server, "tx", "step", tx, "1", "kv.put", "{}", "--dry-run", "--request-id", "r")
    assert both.exit_code == 2
    assert "--request-id has no effect with --dry-run" in both.output
    assert agenttx(server, "tx", "step", tx, "0", "kv.put").exit_code == 2
    assert read(server, tx).revision == 1  # nothing reached the server
    # A refusal by the server: exit 1, its code and message, and the step to send.
    wrong = agenttx(server, "tx", "step", tx, "4", "kv.put", '{"key": "k", "value": 1}')
    assert wrong.exit_code == 1
    assert "FAILED_PRECONDITION" in wrong.output
    assert f"next: Send the same agenttx tx step {tx} again with step_id 1" in wrong.output
    assert agenttx(server, "tx", "rollback", tx).exit_code == 0


def test_an_approval_required_transaction_from_begin_to_commit(server: ServerProcess) -> None:
    refused = agenttx(server, "tx", "begin", "--mode", "approval_required")
    assert refused.exit_code == 1  # approval_required needs a principal
    assert "INVALID_ARGUMENT" in refused.output
    tx = begin(server, "--mode", "approval_required", "--principal", "bob")
    assert (
        agenttx(
            server, "tx", "step", tx, "1", "kv.put", '{"key": "pay/limit", "value": 500}'
        ).exit_code
        == 0
    )

    needs = agenttx(server, "tx", "commit", tx)
    assert needs.exit_code == 1
    assert "FAILED_PRECONDITION" in needs.output
    assert f"Call agenttx tx preview {tx}, show the change" in needs.output.split("next: ")[1]
    assert f"to call agenttx tx approve {tx} with its receipt_id" in needs.output
    p = json.loads(agenttx(server, "tx", "preview", tx, "--json").output)
    receipt, revision = p["receipt_id"], str(p["revision"])
    unapproved = agenttx(server, "tx", "commit", tx, "--receipt-id", receipt)
    assert unapproved.exit_code == 1
    assert (
        f"must call agenttx tx approve {tx} with it; then send this agenttx tx commit"
        in (unapproved.output.split("next: ")[1])
    )
    approved = agenttx(server, "tx", "approve", tx, receipt, "--principal", "alice")
    assert approved.exit_code == 0, approved.output
    assert (
        f"next: agenttx tx commit {tx} --receipt-id {receipt} --expected-revision {revision}"
        in (approved.output)
    )
    stale = agenttx(server, "tx", "commit", tx, "--receipt-id", receipt, "--expected-revision", "1")
    assert stale.exit_code == 1
    assert "ABORTED" in stale.output
    assert f"Call agenttx tx preview {tx}, review" in stale.output.split("next: ")[1]
    assert read(server, tx).status == "ACTIVE"  # a refused commit leaves it open
    done = agenttx(
        server,
        "tx",
        "commit",
        tx,
        "--receipt-id",
        receipt,
        "--expected-revision",
        revision,
        "--json",
    )
    assert done.exit_code == 0, done.output
    reply = json.loads(done.output)
    assert (reply["committed"], reply["transaction_status"]) == (True, "COMMITTED")
    assert [(r.receipt_id, r.status) for r in read(server, tx).receipts] == [(receipt, "approved")]


def test_a_commit_says_which_effects_it_released(server: ServerProcess) -> None:
    tx = begin(server)
    staged = agenttx(
        server, "tx", "step", tx, "1", "effect.stage", '{"channel": "file", "payload": {"n": 1}}'
    )
    assert staged.exit_code == 0, staged.output
    done = agenttx(server, "tx", "commit", tx)
    assert done.exit_code == 0, done.output
    assert f"committed {tx}: 1 step, status COMMITTED" in done.output
    assert "effects: 1 released, " in done.output
    assert f"agenttx effects list --tx {tx}" in done.output


def test_a_server_with_keys_takes_the_key_from_agenttx_api_key(tmp_path: Path) -> None:
    secret = new_secret()
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[key]]\nhash = "{hash_secret(secret)}"\nprincipal = "ops-person"\n'
        'tenant = "acme"\nroles = ["agent"]\n'
    )
    keyed = start_server(tmp_path / "data", "--api-keys", str(keys))
    with keyed.killed_on_error():
        refused = agenttx(keyed, "tx", "begin")
        assert refused.exit_code == 1
        assert "UNAUTHENTICATED" in refused.output
        # Every command, the demo too, says how the CLI takes a key: AGENTTX_API_KEY.
        for args in (
            ("tx", "begin"),
            ("tx", "list"),
            ("tools",),
            ("effects", "list"),
            ("audit", "verify", "tx_x"),
            ("tx", "watch", "tx_x"),
            ("demo", "--server", keyed.address),
        ):
            unkeyed = agenttx(keyed, *args)
            assert unkeyed.exit_code == 1, (args, unkeyed.output)
            assert "next: set AGENTTX_API_KEY to your API key" in unkeyed.output, (
                args,
                unkeyed.output,
            )
        spaced = agenttx(keyed, "tx", "list", key=f" {secret}\n")
        assert spaced.exit_code == 1, spaced.output
        assert "Error: AGENTTX_API_KEY is not an API key" in spaced.output
        wrong = agenttx(keyed, "tx", "list", key=new_secret())
        assert wrong.exit_code == 1, wrong.output
        assert "unknown API key" in wrong.output
        assert "next: AGENTTX_API_KEY holds a key this server does not know" in wrong.output
        began = agenttx(keyed, "tx", "begin", "--json", key=secret)
        assert began.exit_code == 0, began.output
        tx = json.loads(began.output)["transaction_id"]
        step = agenttx(
            keyed, "tx", "step", tx, "1", "kv.put", '{"key": "k", "value": 1}', key=secret
        )
        assert step.exit_code == 0, step.output
        done = agenttx(keyed, "tx", "commit", tx, key=secret)
        assert done.exit_code == 0, done.output
        shown = agenttx(keyed, "tx", "show", tx, "--json", key=secret)
        t = json.loads(shown.output)
        assert (t["status"], t["principal"], t["tenant"]) == ("COMMITTED", "ops-person", "acme")
    assert keyed.terminate() == 0, keyed.log_text()


def test_an_unknown_outcome_says_to_reconcile_and_blocks_the_next_step(
    tmp_path: Path, clock: FakeClock
) -> None:
    # The payment provider never answers: the charge may or may not have happened.
    provider = PaymentProvider().start()
    provider.mode = "hang"
    server = ServerThread(tmp_path, tools=TOOLS, clock=clock).start()
    try:
        began = agenttx(server, "tx", "begin", "--json")
        tx = json.loads(began.output)["transaction_id"]
        unknown = agenttx(server, "tx", "step", tx, "1", "pay.charge", '{"amount": 5}')
        assert unknown.exit_code == 3, unknown.output
        assert f"step 1 of {tx}: OUTCOME_UNKNOWN" in unknown.output
        assert "operation psp:op-" in unknown.output
        assert f"next: in 5 s, agenttx tx reconcile {tx} 1 (never send the step again" in (
            unknown.output
        )
        blocked = agenttx(server, "tx", "step", tx, "2", "kv.put", '{"key": "k", "value": 1}')
        assert blocked.exit_code == 1
        assert (
            f"Call agenttx tx reconcile {tx} with transaction_id {tx} and step_id 1"
            in (blocked.output.split("next: ")[1])
        )
        committing = agenttx(server, "tx", "commit", tx)
        assert committing.exit_code == 1
        assert f"Call agenttx tx reconcile {tx} with" in committing.output.split("next: ")[1]
    finally:
        server.stop()
        provider.stop()


def test_arguments_over_the_limit_are_refused_before_anything_is_sent() -> None:
    from click.testing import CliRunner

    from agenttx.cli import main
    from agenttx.core.limits import MAX_ARGUMENTS_BYTES

    big = '{"a": "' + "x" * MAX_ARGUMENTS_BYTES + '"}'
    for args, stdin in ((["-"], big), ([big], None)):
        # No server listens on port 1: a refusal here is the CLI's own, before any call.
        r = CliRunner().invoke(
            main,
            ["tx", "step", "tx_x", "1", "kv.put", *args, "--server", "127.0.0.1:1"],
            input=stdin,
        )
        assert r.exit_code == 2, r.output
        assert f"more than {MAX_ARGUMENTS_BYTES} bytes" in r.output


# -- --json prints the reply the server sent ------------------------------------------------
# The CLI is a client and prints from the results it returns; its JSON is that result built
# back into the wire reply. Each check reads the same reply over a plain stub — a read of the
# same state, or a stored reply fetched again with the same request id — field by field.


def cli_json(server: ServerProcess, *args: str) -> Any:
    done = agenttx(server, *args, "--json")
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
