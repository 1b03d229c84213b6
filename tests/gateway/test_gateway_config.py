"""The gateway file: what loads, and what is refused at start with its line and reason;
``${env:NAME}`` resolution and masking; the undo mapping's rules."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from agenttx.errors import StartupError
from agenttx.gateway import load_gateway
from agenttx.gateway.mapping import MappingError, apply_mapping, roots_used
from server_process import TESTS_DIR, agenttx_command, server_env


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def refused(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(StartupError) as caught:
        load_gateway(write(tmp_path, text), env or {})
    return caught.value.message


def test_a_full_file_loads(tmp_path: Path) -> None:
    config = load_gateway(
        write(
            tmp_path,
            """
            [servers.files]
            command = "npx"
            args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]
            include = ["read_text_file", "write_file"]

            [servers.tickets]
            url = "https://tickets.example/mcp"
            headers = { Authorization = "Bearer ${env:TICKETS_TOKEN}" }

            [servers.files.tools.write_file]
            effect = "staged"
            timeout_s = 10
            """,
        ),
        {"TICKETS_TOKEN": "s3cr3t"},
    )
    files, tickets = config.servers["files"], config.servers["tickets"]
    assert files.command == "npx"
    assert files.exposes("write_file")
    assert not files.exposes("move_file")
    assert files.tools["write_file"].effect == "staged"
    assert files.tools["write_file"].timeout_ms == 10000
    assert tickets.headers == {"Authorization": "Bearer s3cr3t"}
    assert config.secrets.redact("token s3cr3t here") == "token *** here"


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('[servers.a]\ncommand = "x"\nargz = []\n', 3, "argz: unknown key"),
        ('[servers.a]\ncommand = "x"\nurl = "http://h/mcp"\n', 1, "exactly one of command"),
        (
            '[servers.a]\ncommand = "x"\n\n[servers.a.tools.t]\neffect = "later"\n',
            5,
            "not an effect",
        ),
        ('[servers.a]\ncommand = "x"\n[servers.a.tools.t]\ntimeout_ms = 0\n', 4, "1..86400000"),
        ('[servers.a]\ncommand = "x"\n[servers.a.tools.t]\ntimeout_s = 0\n', 4, "0.001..86400"),
        ('[servers.a]\nurl = "ftp://h"\n', 2, "http:// or https://"),
        (
            '[servers.a]\ncommand = "x"\nenv = { T = "${env:NOPE}" }\n',
            3,
            "NOPE}: the variable is not set",
        ),
        (
            '[servers.a]\ncommand = "x"\nargs = ["${env:AGENTTX_API_KEY}"]\n',
            3,
            "never sent downstream",
        ),
        ('[servers.kv]\ncommand = "x"\n', 1, "AgentTx's own tools"),
        # A server known only from its tools' table: the line of that table, the first place
        # the file names it (it had no line at all).
        (
            '[servers.a]\ncommand = "x"\n\n[servers.m.tools.t]\neffect = "read"\n',
            4,
            "exactly one of",
        ),
        ('[servers.a]\ncommand = "no-such-binary-7f3"\n', 2, "not an executable file or on PATH"),
        (
            '[servers.a]\ncommand = "x"\n[servers.a.tools.t]\nbefore = { tool = "g" }\n',
            4,
            "a before call feeds an undo",
        ),
        (
            '[servers.a]\ncommand = "x"\n[servers.a.tools.t]\n'
            'effect = "staged"\nundo = { tool = "d" }\n',
            5,
            "makes the tool compensatable",
        ),
    ],
)
def test_a_bad_file_is_refused_with_the_line_and_the_reason(
    tmp_path: Path, text: str, line: int, reason: str
) -> None:
    message = refused(tmp_path, text)
    assert f"line {line}:" in message, message
    assert reason in message


def test_bad_toml_names_the_position(tmp_path: Path) -> None:
    message = refused(tmp_path, '[servers.a]\ncommand = "x\n')
    assert "not valid TOML" in message
    assert "line 2" in message


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match="cannot read the file"):
        load_gateway(tmp_path / "absent.toml", {})


def test_agenttx_mcp_refuses_a_bad_gateway_file_at_start(tmp_path: Path) -> None:
    bad = write(tmp_path, '[servers.a]\ncommand = "x"\n[servers.a.tools.t]\neffect = "nope"\n')
    done = subprocess.run(
        agenttx_command("mcp", "--data-dir", str(tmp_path / "data"), "--gateway", str(bad)),
        cwd=TESTS_DIR,
        env=server_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert f"--gateway {bad}, line 4: servers.a.tools.t.effect: 'nope' is not an effect" in (
        done.stderr
    )


def test_the_undo_mapping_follows_the_reference_rules() -> None:
    sources = {
        "args": {"entities": [{"name": "a"}, {"name": "b"}], "n": 2},
        "output": {"id": "x1", "items": [1, 2]},
    }
    assert apply_mapping({"names": "${args.entities.*.name}"}, sources) == {"names": ["a", "b"]}
    assert apply_mapping("${args.n}", sources) == 2  # the JSON type is kept
    assert apply_mapping("id ${output.id} n=${args.n}", sources) == "id x1 n=2"
    assert apply_mapping("${output.items.1}", sources) == 2
    assert apply_mapping("$${args.n}", sources) == "${args.n}"  # an escape
    assert roots_used({"a": ["${output.id}", "${args.n}"]}) == {"output", "args"}
    with pytest.raises(MappingError, match=r"args has no key 'name' \(keys: entities, n\)"):
        apply_mapping("${args.name}", sources)
    with pytest.raises(MappingError, match="there is no before"):
        apply_mapping("${before.value}", sources)
    with pytest.raises(MappingError, match="'\\*' needs an array"):
        apply_mapping("${args.n.*}", sources)
