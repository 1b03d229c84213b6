"""``agenttx serve --hint-rules FILE`` (env ``AGENTTX_HINT_RULES``): a user's TOML rules reach
the hints a real server process sends, and a file it cannot use stops the start, naming it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agenttx.wire import agenttx_pb2 as pb
from server_process import ServerProcess, start_server

DUPLICATE_RULE = """
[[rule]]
id = "duplicate_customer"
category = "unique_violation"
needles = ["duplicate key"]
template = "customer ids are unique in {table}; reuse the existing customer instead."
patterns = ['''unique constraint "(?P<table>[a-z_]{1,60})_pkey"''']
"""

TIMEOUT_RULE = """
[[rule]]
id = "never_matches"
category = "timeout"
template = "this rule exists only to be loaded second."
patterns = ['''a text no tool ever prints''']
"""


def _duplicate_insert_hint(server: ServerProcess) -> pb.ExecuteStepResponse:
    with server.channel() as channel:
        stub = server.stub(channel)
        tx = stub.BeginTransaction(pb.BeginTransactionRequest(agent_id="rules")).transaction_id
        row = json.dumps({"table": "customers", "id": "c-1"})
        for step in (1, 2):
            reply: pb.ExecuteStepResponse = stub.ExecuteStep(
                pb.ExecuteStepRequest(
                    transaction_id=tx, step_id=step, tool_name="record.insert", arguments_json=row
                )
            )
        return reply


def test_rules_given_by_flag_make_the_hints_of_a_real_server(tmp_path: Path) -> None:
    rules = tmp_path / "customer_rules.toml"
    rules.write_text(DUPLICATE_RULE)
    other = tmp_path / "more_rules.toml"
    other.write_text(TIMEOUT_RULE)
    server = start_server(tmp_path / "data", "--hint-rules", str(rules), "--hint-rules", str(other))
    try:
        reply = _duplicate_insert_hint(server)
    finally:
        assert server.terminate() == 0, server.log_text()
    assert reply.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert reply.clean_hint == (
        "Hint: customer ids are unique in customers; reuse the existing customer instead."
    )


def test_rules_given_by_environment_variable_are_loaded(tmp_path: Path) -> None:
    rules = tmp_path / "customer_rules.toml"
    rules.write_text(DUPLICATE_RULE)
    other = tmp_path / "more_rules.toml"
    other.write_text(TIMEOUT_RULE)
    server = start_server(
        tmp_path / "data", env={"AGENTTX_HINT_RULES": os.pathsep.join([str(rules), str(other)])}
    )
    try:
        reply = _duplicate_insert_hint(server)
    finally:
        assert server.terminate() == 0, server.log_text()
    assert "reuse the existing customer" in reply.clean_hint


def test_without_the_flag_the_built_in_rules_answer(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        reply = _duplicate_insert_hint(server)
    finally:
        assert server.terminate() == 0, server.log_text()
    assert reply.clean_hint.startswith("Hint: ")
    assert "reuse the existing customer" not in reply.clean_hint


def test_a_missing_rules_file_stops_the_start_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_rules.toml"
    with pytest.raises(AssertionError, match=r"exited with 1:[\s\S]*--hint-rules") as failed:
        start_server(tmp_path / "data", "--hint-rules", str(missing))
    assert f"{missing}: cannot read the file" in str(failed.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[rule]\nid = 1", "not valid TOML"),
        ('[[rule]]\nid = "r"\ncategory = "no_such_category"\npatterns = ["x"]\n', "'category'"),
        ('[[rule]]\nid = "r"\ncategory = "timeout"\ntemplate = "t"\npatterns = ["("]\n', "regular"),
    ],
)
def test_a_rules_file_that_does_not_parse_stops_the_start_naming_it(
    tmp_path: Path, text: str, problem: str
) -> None:
    bad = tmp_path / "bad_rules.toml"
    bad.write_text(text)
    with pytest.raises(AssertionError, match=r"exited with 1:") as failed:
        start_server(tmp_path / "data", env={"AGENTTX_HINT_RULES": str(bad)})
    message = str(failed.value)
    assert str(bad) in message
    assert problem in message
