"""Each CLI command that fronts one operation is declared once, by its row's ``cli`` binding
(``api/operations/cli_bindings.py``), and made by ``cli/rows.py``. The bindings say their
options' kinds themselves (the CLI reads them without the table or protobuf), so this holds
each to its row's request, each action to its binding, and a run to not importing the table."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
from google.protobuf.descriptor import FieldDescriptor

from agenttx.api.operations import ROWS, Row
from agenttx.api.operations.cli_bindings import COMMANDS
from agenttx.cli.actions import ACTIONS
from agenttx.cli.rows import action_values

BOUND = [r for r in ROWS if r.cli is not None]
_INTEGERS = {
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
}


def test_every_binding_is_one_rows_and_names_it() -> None:
    assert sorted(id(r.cli) for r in BOUND) == sorted(id(c) for c in COMMANDS)
    assert all(r.cli is not None and r.cli.row == r.name for r in BOUND)
    spelled = [(c.group, c.name) for c in COMMANDS]
    assert len(set(spelled)) == len(spelled)


@pytest.mark.parametrize("row", BOUND, ids=lambda r: r.name)
def test_an_option_named_for_a_request_field_has_its_kind(row: Row) -> None:
    assert row.cli is not None
    fields = row.request.DESCRIPTOR.fields_by_name
    for o in row.cli.options:
        fd = fields.get(o.name)
        if fd is None:
            # One the CLI alone reads (``--limit``, ``--dead``, ``tx begin --agent``): only an
            # action can take it; the generic one fills the request by field name.
            assert row.name in ACTIONS, (row.name, o.name)
            continue
        assert o.is_flag == (fd.type == FieldDescriptor.TYPE_BOOL), o.name
        assert o.multiple == fd.is_repeated, o.name
        numeric = o.number is not None or o.between is not None
        assert numeric == (fd.type in _INTEGERS), o.name
        assert o.positional or not o.required or not o.is_flag, o.name


@pytest.mark.parametrize("row", BOUND, ids=lambda r: r.name)
def test_an_action_takes_exactly_its_bindings_values(row: Row) -> None:
    assert row.cli is not None
    if row.name not in ACTIONS:
        return
    taken = set(inspect.signature(ACTIONS[row.name]).parameters)
    assert taken == action_values(row.cli)


def test_every_action_is_a_bound_rows() -> None:
    assert set(ACTIONS) <= {r.name for r in BOUND}


def test_listing_and_making_every_bound_command_imports_no_table_or_protobuf() -> None:
    """What ``agenttx <group> --help`` and every bound command's ``--help`` do: the bindings
    and the actions only, never the table (the engine's reply builders) or the wire module."""
    code = """
import json, sys, click
from agenttx.cli import main
for group in (main, *(main.commands[g] for g in ("tx", "effects", "audit"))):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        group.get_command(ctx, name)
print(json.dumps(sorted(sys.modules)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(done.stdout)
    heavy = ("agenttx.api.operations.table", "agenttx.wire", "google.protobuf", "pydantic")
    assert not [m for m in loaded if m.startswith(heavy)]
