"""A count of one reads in the singular everywhere (``agenttx.plural``): the MCP commit text,
the server's start-up line, the CLI's summaries; and no message in ``src`` builds its own
plural (``(s)``, ``'s' if``) instead of going through the one helper."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from click.testing import CliRunner

import agenttx
from agenttx.auth.keys import hash_secret, new_secret
from agenttx.cli import main
from agenttx.plural import named, plural
from mcp_harness import stdio_client, structured, text
from server_process import start_server

SRC = Path(agenttx.__file__).parent


def test_plural_and_named_pick_the_form_by_the_count() -> None:
    assert [plural(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert plural(1, "API key") == "1 API key"
    assert plural(2, "entry", "entries") == "2 entries"
    assert named("field", ["a"]) == "field a"
    assert named("field", ["a", "b"]) == "fields a, b"


async def test_the_mcp_commit_of_one_step_and_one_effect_reads_singular(tmp_path: Path) -> None:
    async with stdio_client(tmp_path / "data", "auto") as c:
        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        await c.call_tool(
            "run_step",
            {
                "transaction_id": tx,
                "step_id": 1,
                "tool": "effect.stage",
                "arguments": {"channel": "file", "payload": {"n": 1}, "idempotency_key": "k1"},
            },
        )
        done = text(await c.call_tool("commit_transaction", {"transaction_id": tx}))
    assert "1 step took effect; 1 effect released" in done, done


def test_the_server_start_line_and_the_cli_summaries_read_singular(tmp_path: Path) -> None:
    secret = new_secret()
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[key]]\nhash = "{hash_secret(secret)}"\nprincipal = "p"\ntenant = "t"\n'
        'roles = ["admin"]\n'
    )
    server = start_server(tmp_path / "data", "--api-keys", str(keys), log_format="text")
    with server.killed_on_error():
        assert "· auth 1 API key ·" in server.log_text(), server.log_text()
        env = {"AGENTTX_SERVER": server.address, "AGENTTX_API_KEY": secret, "COLUMNS": "200"}

        def cli(*args: str) -> str:
            result = CliRunner().invoke(main, list(args), env=env)
            assert result.exit_code == 0, result.output
            return result.output

        tx = json.loads(cli("tx", "begin", "--json"))["transaction_id"]
        cli("tx", "step", tx, "1", "kv.put", '{"key": "k", "value": 1}')
        assert f"committed {tx}: 1 step, status COMMITTED" in cli("tx", "commit", tx)
        assert cli("tx", "list").rstrip().endswith("\n1 transaction")
        assert f"ok   {tx}  " in cli("audit", "verify", tx)
    assert server.terminate() == 0, server.log_text()


# A count built into a message by hand: "step(s)" in a string, or a ternary adding the "s".
_PARENTHESISED = re.compile(r"[a-z]\(s\)")


def _hand_made(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _PARENTHESISED.search(node.value.replace("http(s)", "")):
                lines.append(node.lineno)
        elif isinstance(node, ast.IfExp) and any(
            isinstance(n, ast.Constant) and n.value == "s" for n in (node.body, node.orelse)
        ):
            lines.append(node.lineno)
    return lines


def test_no_message_builds_its_own_plural() -> None:
    found = [
        f"{path.relative_to(SRC)}:{number}"
        for path in sorted(SRC.rglob("*.py"))
        if "wire" not in path.parts and path.name != "plural.py"
        for number in _hand_made(ast.parse(path.read_text("utf-8")))
    ]
    assert not found, "say the count with agenttx.plural:\n" + "\n".join(found)
