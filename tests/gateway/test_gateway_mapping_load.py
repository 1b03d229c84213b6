"""An undo or ``before`` mapping that can never resolve is refused when the gateway file is
loaded, with its line and reason (issue 14 point 1), not at the first call: before, a bad
``before`` mapping silently staged every call, and a bad undo that needs the output failed
only after the downstream call had been made, leaving nothing to undo it. A tool declaring
such an undo in ``_meta`` is not offered."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mcp import types

from agenttx.errors import StartupError
from agenttx.gateway import load_gateway
from agenttx.gateway.mapping import check_template
from agenttx.gateway.tools import UNDO_META_KEY, classify
from agenttx.types import EffectClass

HEAD = '[servers.a]\ncommand = "x"\n[servers.a.tools.t]\n'


def refused(tmp_path: Path, tool_table: str) -> str:
    path = tmp_path / "gateway.toml"
    path.write_text(HEAD + textwrap.dedent(tool_table).lstrip())
    with pytest.raises(StartupError) as caught:
        load_gateway(path, {})
    return caught.value.message


@pytest.mark.parametrize(
    ("table", "line", "reason"),
    [
        (  # an unclosed reference
            'undo = { tool = "d", arguments = { key = "${args.key" } }\n',
            4,
            "undo.arguments: bad reference syntax '${args.key'",
        ),
        (  # inside a longer string, nested in an array
            'undo = { tool = "d", arguments = { keys = ["id ${output.id.}"] } }\n',
            4,
            "bad reference syntax",
        ),
        (  # ${before} without a before call
            'undo = { tool = "d", arguments = { v = "${before.value}" } }\n',
            4,
            "reference ${before.value} can never resolve: there is no before for this call "
            "(it has ${args.…}, ${output.…})",
        ),
        (  # the before call runs first: it has only the arguments
            'before = { tool = "g", arguments = { k = "${output.key}" } }\n'
            'undo = { tool = "d", arguments = { v = "${before.value}" } }\n',
            4,
            "before.arguments: reference ${output.key} can never resolve: there is no output",
        ),
    ],
)
def test_a_mapping_that_can_never_resolve_is_refused_at_load(
    tmp_path: Path, table: str, line: int, reason: str
) -> None:
    message = refused(tmp_path, table)
    assert f"line {line}: servers.a.tools.t." in message, message
    assert reason in message, message


def test_sound_mappings_still_load(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        HEAD.replace('"x"', '"sh"')
        + 'before = { tool = "g", arguments = { k = "${args.key}", lit = "$${args.x}" } }\n'
        'undo = { tool = "p", arguments = { k = "${args.key}", v = "${before.value}", '
        'shell = "${HOME}", n = "${output.items.*.id}" } }\n'
    )
    tool = load_gateway(path, {}).servers["a"].tools["t"]
    assert tool.undo is not None
    assert tool.before is not None
    check_template(tool.undo.arguments, ("args", "output", "before"))  # nothing raised


def test_a_meta_undo_that_can_never_resolve_is_not_offered() -> None:
    def declared(arguments: dict[str, object]) -> types.Tool:
        return types.Tool(
            name="create",
            input_schema={"type": "object"},
            meta={UNDO_META_KEY: {"tool": "delete", "arguments": arguments}},
        )

    ok = classify(declared({"key": "${output.id}"}), None)
    assert ok.effect is EffectClass.COMPENSATABLE
    with pytest.raises(ValueError, match=r"there is no before for this call"):
        classify(declared({"key": "${before.id}"}), None)
    with pytest.raises(ValueError, match=r"_meta\['io.agenttx/undo'\]: bad reference syntax"):
        classify(declared({"key": "${args.id"}), None)
