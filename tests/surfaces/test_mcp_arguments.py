"""The MCP tools' arguments are read as their rows' bindings declare them
(``agenttx.api.mcp.arguments``): each tool reads exactly the properties its input schema
declares, each by the kind its schema type says, leniently as models send them."""

from __future__ import annotations

from typing import Any

import pytest

from agenttx.api.mcp.arguments import ARGUMENTS, Arguments, BadArgument
from agenttx.api.mcp.catalog import LISTED_ROWS, tool

EVERY_TOOL = [tool(r) for r in LISTED_ROWS]
# What each kind reads, by the schema it is declared with (``mode`` is an enum of strings).
KINDS = {"string": "text", "integer": "number", "boolean": "flag", "array": "strings"}
KINDS |= {"object": "json"}


def _kind(schema: dict[str, Any]) -> str:
    return KINDS[schema.get("type", "string")]


def test_every_tool_has_a_reading() -> None:
    assert sorted(ARGUMENTS) == sorted(t.name for t in EVERY_TOOL)
    assert len(EVERY_TOOL) == 19


@pytest.mark.parametrize("tool", EVERY_TOOL, ids=lambda t: t.name)
def test_a_row_reads_what_the_schema_declares_by_its_type(tool: Any) -> None:
    declared = tool.input_schema["properties"]
    row = {arg.name: arg.kind for arg in ARGUMENTS[tool.name]}
    assert sorted(row) == sorted(declared)
    assert row == {name: _kind(schema) for name, schema in declared.items()}


def test_arguments_are_read_leniently() -> None:
    a = Arguments(
        {"transaction_id": "tx", "step_id": "7", "tool": "kv.put", "arguments": '{"k": 1}'}
    ).read("run_step")
    assert a == {
        "transaction_id": "tx",
        "step_id": 7,
        "tool": "kv.put",
        "arguments": '{"k": 1}',
        "dry_run": False,
        "reasoning": "",
    }
    listed = Arguments({"status": "active, committed", "page_size": 5.0}).read("list_transactions")
    assert listed == {
        "page_size": 5,
        "status": ["active", "committed"],
        "agent_id": "",
        "page_token": "",
    }
    assert Arguments({"transaction_id": "tx", "history": " TRUE "}).read("get_transaction")[
        "history"
    ]


def test_a_page_size_reads_zero_as_the_default_where_a_step_id_does_not() -> None:
    # A binding's ``reading`` bounds (``agenttx.numbers``) beside the schema's minimum 1.
    assert Arguments({"page_size": 0}).read("list_transactions")["page_size"] == 0
    assert Arguments({"page_size": "0"}).read("list_effects")["page_size"] == 0
    with pytest.raises(BadArgument, match="from 0 to 500, got 501"):
        Arguments({"page_size": 501}).read("list_transactions")
    with pytest.raises(BadArgument, match="from 1 to 4294967295"):
        Arguments({"transaction_id": "tx", "step_id": 0}).read("reconcile_step")


@pytest.mark.parametrize(
    ("tool", "values", "message"),
    [
        ("run_step", {"step_id": 1, "tool": "kv.put"}, "transaction_id is required"),
        ("run_step", {"transaction_id": "", "step_id": 1}, "transaction_id must not be empty"),
        ("run_step", {"transaction_id": 5}, "transaction_id must be a string, got int"),
        ("run_step", {"transaction_id": "tx"}, "step_id is required"),
        ("run_step", {"transaction_id": "tx", "step_id": "9" * 5000}, "from 1 to 4294967295"),
        (
            "run_step",
            {"transaction_id": "tx", "step_id": 1, "tool": "t", "arguments": [1]},
            "arguments must be a JSON object (or its text)",
        ),
        ("get_transaction", {"transaction_id": "tx", "history": 1}, "history must be true or"),
        (
            "approve_commit",
            {"transaction_id": "t", "receipt_id": "r", "principal": "p", "roles": [1]},
            "roles must be a list of strings",
        ),
        ("refuse_compensation", {"transaction_id": "t", "principal": "p"}, "reason is required"),
    ],
)
def test_the_first_wrong_argument_is_named(tool: str, values: dict[str, Any], message: str) -> None:
    with pytest.raises(BadArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        Arguments(values).read(tool)
