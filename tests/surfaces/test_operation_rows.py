"""A row with an ``mcp`` or ``cli`` binding reaches MCP and the CLI by the row alone
(``api/mcp/catalog.py`` and ``handlers.py``, ``cli/rows.py``): its tool and its command are
made from the binding and the row's messages. A tool without a handler of its own is served
generically and sends the row's request. The outcome on every surface is the conformance
suite's (``test_safety.py``: ``find_transaction``); this file checks what is derived, and
that it cannot drift from the messages."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from agenttx.api.fields import message_fields
from agenttx.api.mcp.arguments import Arguments, BadArgument, reading
from agenttx.api.mcp.catalog import LISTED_ROWS, tool
from agenttx.api.mcp.handlers import HANDLERS
from agenttx.api.operations import ROWS, Row
from agenttx.api.operations.mcp_bindings import LISTED
from agenttx.api.operations.requests import clash, filled
from agenttx.cli import main
from agenttx.cli.rows import parameters
from agenttx.errors import InvalidArgument
from agenttx.wire import agenttx_pb2 as pb
from surfaces.test_mcp_arguments import KINDS
from surfaces.test_mcp_schemas import unportable

MCP_BOUND = [r for r in ROWS if r.mcp is not None]
CLI_BOUND = [r for r in ROWS if r.cli is not None]
# The bound rows served from the row alone (no handler of their own in ``handlers.py``).
GENERIC = [r for r in MCP_BOUND if r.name not in HANDLERS]


def test_every_mcp_tool_is_a_row_s_binding_listed_once() -> None:
    assert len(MCP_BOUND) == len(LISTED) == 19
    assert [r.mcp for r in LISTED_ROWS] == list(LISTED)
    assert set(HANDLERS) <= {r.name for r in MCP_BOUND}  # a handler is a bound row's
    assert [r.name for r in GENERIC] == ["find_transaction"]


def test_every_row_is_bound_to_a_command_but_the_page_of_steps() -> None:
    # ``tx show`` reads a long history page by page with ListSteps (the client's).
    assert {r.name for r in ROWS if r.cli is None} == {"list_steps"}


@pytest.mark.parametrize("row", MCP_BOUND, ids=lambda r: r.name)
def test_a_bound_tool_reads_what_it_declares_and_its_schemas_are_portable(row: Row) -> None:
    t = tool(row)
    declared = t.input_schema["properties"]
    # Each argument is read by the kind its declared type says (``arguments.py``).
    assert {a.name: a.kind for a in reading(row)} == {
        name: KINDS[schema.get("type", "string")] for name, schema in declared.items()
    }
    assert unportable(t.input_schema) == []
    assert t.output_schema is not None
    assert unportable(t.output_schema) == []


@pytest.mark.parametrize("row", GENERIC, ids=lambda r: r.name)
def test_a_generic_tool_reads_request_fields_and_declares_every_reply_field(row: Row) -> None:
    t = tool(row)
    assert set(t.input_schema["properties"]) <= set(row.request.DESCRIPTOR.fields_by_name)
    assert t.output_schema is not None
    # Every field of the reply is declared, under the name ``api.fields`` gives it.
    reply_fields = set(message_fields(row.reply()))
    assert reply_fields | {"ok", "error", "continuation", "diagnostics"} == set(
        t.output_schema["properties"]
    )


def test_the_tools_text_formats_from_any_reply_of_the_row() -> None:
    [row] = GENERIC
    assert row.mcp is not None
    fields = message_fields(pb.FindTransactionResponse(), short_enums=True)
    assert row.mcp.text.format_map(fields).startswith("Transaction  is  (ending: )")


def test_a_lenient_argument_is_read_and_a_wrong_one_named() -> None:
    [row] = GENERIC
    read = {a.name: a for a in reading(row)}
    assert read["receipt_id"].read(None) == ""
    with pytest.raises(BadArgument, match="receipt_id must be a string"):
        read["receipt_id"].read(7)
    assert Arguments({"receipt_id": "r"}).values == {"receipt_id": "r"}


def test_a_request_is_filled_by_name_and_two_members_of_a_oneof_are_refused() -> None:
    r = filled(pb.FindTransactionRequest, {"receipt_id": "r", "request_id": ""})
    assert r.WhichOneof("key") == "receipt_id"
    assert filled(pb.FindTransactionRequest, {}).WhichOneof("key") is None
    both = {"receipt_id": "r", "request_id": "q"}
    assert clash(pb.FindTransactionRequest, both) == ["receipt_id", "request_id"]
    with pytest.raises(InvalidArgument, match="give only one of receipt_id and request_id"):
        filled(pb.FindTransactionRequest, both)
    # A tuple (as click gives a repeated option) is a list; an empty text is unset.
    listed = filled(pb.ListEffectsRequest, {"statuses": ("dead",), "transaction_id": ""})
    assert list(listed.statuses) == ["dead"]
    assert not listed.transaction_id


@pytest.mark.parametrize("row", CLI_BOUND, ids=lambda r: r.name)
def test_a_bound_command_is_in_its_group_with_an_option_per_field(row: Row) -> None:
    assert row.cli is not None
    group = main.commands[row.cli.group] if row.cli.group else main
    assert isinstance(group, click.Group)
    ctx = click.Context(group)
    assert row.cli.name in group.list_commands(ctx)
    command = group.get_command(ctx, row.cli.name)
    assert command is not None
    # Hidden: an old spelling that still works (``agenttx.renamed``).
    options = {p.name for p in command.params if not getattr(p, "hidden", False)}
    assert options == {o.name for o in parameters(row.cli)}


def test_two_options_of_one_oneof_are_a_usage_error_before_any_call() -> None:
    # No server listens on port 9: the refusal comes before the client would be used.
    argv = ["tx", "find", "--receipt-id", "r", "--request-id", "q", "--server", "127.0.0.1:9"]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 2
    assert "give only one of --receipt-id, --request-id" in r.stderr
