"""One name per concept (issue 22.8): ``tx begin --agent`` like ``tx list --agent``, and every
duration in seconds with an ``_s`` name (``--step-timeout-s``, ``--tx-idle-timeout-s``,
``AGENTTX_GRACE_S``, ``Engine.open(tx_idle_timeout_s=)``, a gateway tool's ``timeout_s``).
Every old spelling still works — read as the new one, in the new unit — and says on stderr, in
one line, what to write instead; stdout stays the command's own. Real ``agenttx serve`` and
``agenttx`` subprocesses where a server is involved."""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import agenttx
from agenttx.cli import main
from agenttx.gateway import load_gateway
from agenttx.renamed import RENAMED
from agenttx.server import ServeConfig
from server_process import ServerProcess, agenttx_command, server_env, start_server

pytest_plugins = ["serve_capture"]

DOCS = Path(__file__).resolve().parents[2] / "docs"


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "200", **(env or {})})


# old flag, its value, the new setting, the value it must read as.
OLD_SERVE_FLAGS = [
    ("--step-timeout-ms", "1500", "step_timeout_s", 1.5),
    ("--tx-idle-timeout-secs", "60", "tx_idle_timeout_s", 60),
    ("--receipt-ttl-secs", "120", "receipt_ttl_s", 120),
    ("--grace-secs", "2.5", "grace_s", 2.5),
    ("--http-header-timeout-secs", "3", "http_header_timeout_s", 3.0),
]


@pytest.mark.parametrize(("flag", "text", "setting", "expected"), OLD_SERVE_FLAGS)
def test_an_old_serve_flag_still_works_and_says_its_new_name(
    captured: list[ServeConfig], flag: str, text: str, setting: str, expected: float
) -> None:
    new = "--" + setting.replace("_", "-")
    result = invoke("serve", flag, text)
    assert result.exit_code == 0, result.output
    assert getattr(captured[0], setting) == expected
    assert result.stderr.splitlines() == [f"agenttx: {flag} is deprecated; use {new} instead"]
    assert "deprecated" not in result.stdout


@pytest.mark.parametrize(("flag", "text", "setting", "expected"), OLD_SERVE_FLAGS)
def test_an_old_environment_variable_still_works_and_says_its_new_name(
    captured: list[ServeConfig], flag: str, text: str, setting: str, expected: float
) -> None:
    old_env = "AGENTTX_" + flag[2:].replace("-", "_").upper()
    result = invoke("serve", env={old_env: text})
    assert result.exit_code == 0, result.output
    assert getattr(captured[0], setting) == expected
    new_env = "AGENTTX_" + setting.upper()
    assert result.stderr.splitlines() == [
        f"agenttx: {old_env} is deprecated; use {new_env} instead"
    ]


def test_the_new_names_take_seconds_and_say_nothing(captured: list[ServeConfig]) -> None:
    result = invoke(
        "serve",
        "--step-timeout-s",
        "0.25",
        "--receipt-ttl-s",
        "60",
        env={"AGENTTX_TX_IDLE_TIMEOUT_S": "5", "AGENTTX_GRACE_S": "1"},
    )
    assert result.exit_code == 0, result.output
    c = captured[0]
    assert (c.step_timeout_s, c.receipt_ttl_s, c.tx_idle_timeout_s, c.grace_s) == (
        0.25,
        60,
        5,
        1.0,
    )
    assert result.stderr == ""


def test_given_both_the_new_name_wins(captured: list[ServeConfig]) -> None:
    result = invoke("serve", "--step-timeout-s", "2", "--step-timeout-ms", "9000")
    assert result.exit_code == 0, result.output
    assert captured[0].step_timeout_s == 2.0
    assert "--step-timeout-ms is deprecated" in result.stderr


def test_an_old_flag_keeps_its_range(captured: list[ServeConfig]) -> None:
    result = invoke("serve", "--step-timeout-ms", "0")
    assert result.exit_code == 2
    assert "--step-timeout-ms" in result.output
    assert not captured


def test_help_shows_only_the_new_names() -> None:
    shown = invoke("serve", "--help").stdout
    for new in ("--step-timeout-s", "--tx-idle-timeout-s", "--receipt-ttl-s", "--grace-s"):
        assert new in shown
    for old in ("--step-timeout-ms", "-secs"):
        assert old not in shown
    assert invoke("serve", "--effect-tools").exit_code == 2  # mcp's old name only
    begin = invoke("tx", "begin", "--help").stdout
    assert "--agent " in begin
    assert "--agent-id" not in begin


def test_mcp_takes_the_old_engine_flags_too(tmp_path: Path) -> None:
    # Every engine flag (serve and mcp share them) keeps its old name on both commands: the
    # real `agenttx mcp`, its stdin closed at once, starts, says so, and stops cleanly.
    ran = subprocess.run(
        agenttx_command(
            "mcp",
            "--data-dir",
            str(tmp_path / "d"),
            "--step-timeout-ms",
            "1500",
            "--receipt-ttl-secs",
            "60",
            "--effect-tools",  # its own old name: mcp alone had it
        ),
        env=server_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == ""  # stdout is the MCP stream: a notice never goes there
    notices = [line for line in ran.stderr.splitlines() if "deprecated" in line]
    assert notices == [
        "agenttx: --effect-tools is deprecated; use --mcp-effect-tools instead",
        "agenttx: --step-timeout-ms is deprecated; use --step-timeout-s instead",
        "agenttx: --receipt-ttl-secs is deprecated; use --receipt-ttl-s instead",
    ]


# -- against a real server ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # The server itself started with old spellings: it starts, and its log says so.
    proc = start_server(
        tmp_path_factory.mktemp("renamed") / "data",
        "--step-timeout-ms",
        "20000",
        env={"AGENTTX_TX_IDLE_TIMEOUT_SECS": "600"},
    )
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agenttx_command(*args, "--server", server.address),
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_server_started_with_old_names_runs_and_said_so(server: ServerProcess) -> None:
    said = server.log_path.read_text()
    assert "agenttx: --step-timeout-ms is deprecated; use --step-timeout-s instead" in said
    assert "agenttx: AGENTTX_TX_IDLE_TIMEOUT_SECS is deprecated" in said


def test_tx_begin_takes_agent_like_tx_list(server: ServerProcess) -> None:
    began = cli(server, "tx", "begin", "--agent", "renamer", "--json")
    assert began.returncode == 0, began.stderr
    assert began.stderr == ""
    tx = json.loads(began.stdout)["transaction_id"]
    listed = cli(server, "tx", "list", "--agent", "renamer", "--json")
    assert listed.returncode == 0, listed.stderr
    assert tx in listed.stdout


def test_tx_begin_agent_id_still_works_with_a_notice(server: ServerProcess) -> None:
    began = cli(server, "tx", "begin", "--agent-id", "old-script", "--json")
    assert began.returncode == 0, began.stderr
    assert began.stderr.splitlines() == ["agenttx: --agent-id is deprecated; use --agent instead"]
    tx = json.loads(began.stdout)["transaction_id"]  # stdout is the command's own JSON
    shown = cli(server, "tx", "show", tx, "--json")
    assert json.loads(shown.stdout)["agent_id"] == "old-script"


# -- the Python API and the gateway file --------------------------------------------------------


async def test_engine_open_takes_the_old_keywords_with_a_warning(tmp_path: Path) -> None:
    with pytest.warns(FutureWarning, match=r"tx_idle_timeout_secs=\.\.\.\) is deprecated"):
        engine = await agenttx.Engine.open(
            f"sqlite:///{tmp_path / 'a.db'}", tx_idle_timeout_secs=42, background=False
        )
    try:
        assert engine.config.tx_idle_timeout_s == 42
    finally:
        await engine.close()
    with pytest.raises(TypeError, match="tx_idle_timeout_sec"):
        await agenttx.Engine.open(f"sqlite:///{tmp_path / 'b.db'}", tx_idle_timeout_sec=1)


def test_a_gateway_file_takes_timeout_s_and_still_reads_timeout_ms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        textwrap.dedent(
            """
            [servers.a]
            command = "sh"
            connect_timeout_s = 5
            [servers.a.tools.new]
            timeout_s = 1.5
            [servers.a.tools.old]
            timeout_ms = 2500
            """
        )
    )
    config = load_gateway(path, {})
    a = config.servers["a"]
    assert a.connect_timeout_ms == 5000
    assert (a.tools["new"].timeout_ms, a.tools["old"].timeout_ms) == (1500, 2500)
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "agenttx: servers.a.tools.old.timeout_ms (gateway file) is deprecated; use timeout_s "
        "(seconds) instead"
    ]


def test_the_docs_name_every_renamed_setting() -> None:
    page = (DOCS / "operations.md").read_text()
    names = page[page.index("## Names") :]
    names = names[: names.index("\n## ", 4)]
    for r in RENAMED:
        assert r.old_flag in names or f"`{r.old}" in names, r.old
        assert r.new_flag in names or f"`{r.new}" in names, r.new
