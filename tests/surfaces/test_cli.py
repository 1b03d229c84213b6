"""The ``agenttx`` command line: serve's flags and environment, and the commands that talk to
a running server."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agenttx.cli import main
from agenttx.server import ServeConfig
from agenttx.types import RollbackPolicy
from agenttx.wire import agenttx_pb2 as pb
from server_process import ServerProcess, agenttx_command, server_env, start_server

pytest_plugins = ["serve_capture"]

WIDE = {"COLUMNS": "240"}  # rich tables at a width that never truncates an id


@pytest.fixture(autouse=True)
def _keep_logging() -> Iterator[None]:
    """``serve`` configures the ``agenttx`` logger; put it back for the other tests."""
    logger = logging.getLogger("agenttx")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={**WIDE, **(env or {})})


# -- serve: flags, environment, refusals ------------------------------------------------------


def test_serve_defaults_need_no_configuration(captured: list[ServeConfig]) -> None:
    result = invoke("serve")
    assert result.exit_code == 0, result.output
    (config,) = captured
    assert config.listen_addr == "127.0.0.1:50051"
    assert config.store_url == "sqlite:///agenttx-data/agenttx.db"
    assert config.files_dir == Path("agenttx-data/files")
    assert config.outbox_file == Path("agenttx-data/outbox.jsonl")
    assert config.metrics_addr == "127.0.0.1:9464"
    assert config.policy == RollbackPolicy(2, 1, 2.0)
    assert (config.step_timeout_s, config.tx_idle_timeout_s) == (30.0, 900)
    assert (config.compensation_retries, config.max_constraints) == (3, 32)
    assert config.sync_writes is False
    assert config.grace_s == 10.0
    assert config.log_format == "text"


FLAGS = {
    "--listen-addr": ("0.0.0.0:6000", "listen_addr", "0.0.0.0:6000"),
    "--log-format": ("json", "log_format", "json"),
    "--data-dir": ("/srv/agenttx", "data_dir", Path("/srv/agenttx")),
    "--store": ("sqlite:///elsewhere.db", "store", "sqlite:///elsewhere.db"),
    "--sync-writes": ("true", "sync_writes", True),
    "--fs-root": ("/srv/files", "fs_root", Path("/srv/files")),
    "--outbox-path": ("/srv/out.jsonl", "outbox_path", Path("/srv/out.jsonl")),
    "--step-timeout-s": ("1.5", "step_timeout_s", 1.5),
    "--tx-idle-timeout-s": ("0", "tx_idle_timeout_s", 0),
    "--compensation-retries": ("7", "compensation_retries", 7),
    "--max-constraints": ("4096", "max_constraints", 4096),
    "--metrics-addr": ("off", "metrics_addr", None),
    "--grace-s": ("2.5", "grace_s", 2.5),
    "--tools": ("user_tools", "tools", ("user_tools",)),
    "--max-streams": ("7", "max_streams", 7),
    "--max-streams-per-key": ("2", "max_streams_per_key", 2),
}
POLICY_FLAGS = {
    "--max-local-depth": ("16", "max_local_depth", 16),
    "--max-global-resets": ("0", "max_global_resets", 0),
    "--replay-budget-factor": ("0.1", "replay_budget_factor", 0.1),
    "--max-step-retries": ("5", "max_step_retries", 5),
}


@pytest.mark.parametrize("source", ["flag", "env"])
def test_every_serve_setting_comes_from_its_flag_or_env_var(
    captured: list[ServeConfig], source: str
) -> None:
    args: list[str] = []
    env: dict[str, str] = {}
    for flag, (text, _, _) in {**FLAGS, **POLICY_FLAGS}.items():
        if source == "flag":
            args += [flag, text]
        else:
            env["AGENTTX_" + flag[2:].replace("-", "_").upper()] = text
    result = invoke("serve", *args, env=env)
    assert result.exit_code == 0, result.output
    (config,) = captured
    for _, (_, attr, expected) in FLAGS.items():
        assert getattr(config, attr) == expected, attr
    for _, (_, attr, expected) in POLICY_FLAGS.items():
        assert getattr(config.policy, attr) == expected, attr


def test_a_flag_beats_its_env_var(captured: list[ServeConfig]) -> None:
    result = invoke("serve", "--max-constraints", "8", env={"AGENTTX_MAX_CONSTRAINTS": "9"})
    assert result.exit_code == 0, result.output
    assert captured[0].max_constraints == 8


@pytest.mark.parametrize("source", ["flag", "env"])
def test_the_stream_limits_keep_their_first_http_names(
    captured: list[ServeConfig], source: str
) -> None:
    """``--max-streams`` counts every surface's streams; it was ``--http-max-streams`` while
    only HTTP streams were counted, and the old flags and variables still work."""
    if source == "flag":
        result = invoke("serve", "--http-max-streams", "7", "--http-max-streams-per-key", "2")
    else:
        env = {"AGENTTX_HTTP_MAX_STREAMS": "7", "AGENTTX_HTTP_MAX_STREAMS_PER_KEY": "2"}
        result = invoke("serve", env=env)
    assert result.exit_code == 0, result.output
    assert (captured[0].max_streams, captured[0].max_streams_per_key) == (7, 2)
    # The new name's variable is read first.
    both = {"AGENTTX_MAX_STREAMS": "9", "AGENTTX_HTTP_MAX_STREAMS": "7"}
    assert invoke("serve", env=both).exit_code == 0
    assert captured[1].max_streams == 9


def test_a_bare_sync_writes_flag_turns_it_on(captured: list[ServeConfig]) -> None:
    assert invoke("serve", "--sync-writes").exit_code == 0
    assert captured[0].sync_writes is True


OUT_OF_RANGE = [
    ("--max-local-depth", "-1"),
    ("--max-local-depth", "17"),
    ("--max-global-resets", "17"),
    ("--max-step-retries", "33"),
    ("--max-step-retries", "-1"),
    ("--replay-budget-factor", "0.05"),
    ("--replay-budget-factor", "1000.5"),
    ("--step-timeout-s", "0"),
    ("--step-timeout-s", "86400.5"),
    ("--tx-idle-timeout-s", "-1"),
    ("--compensation-retries", "101"),
    ("--max-constraints", "0"),
    ("--max-constraints", "4097"),
    ("--log-format", "xml"),
    ("--sync-writes", "maybe"),
    ("--grace-s", "-1"),
]


@pytest.mark.parametrize(("flag", "text"), OUT_OF_RANGE)
def test_out_of_range_flags_refuse_to_start(
    captured: list[ServeConfig], flag: str, text: str
) -> None:
    result = invoke("serve", flag, text)
    assert result.exit_code == 2
    assert f"Invalid value for '{flag}'" in result.output
    assert not captured


@pytest.mark.parametrize(("flag", "text"), OUT_OF_RANGE[:4])
def test_out_of_range_env_vars_refuse_to_start_naming_the_variable(
    captured: list[ServeConfig], flag: str, text: str
) -> None:
    name = "AGENTTX_" + flag[2:].replace("-", "_").upper()
    result = invoke("serve", env={name: text})
    assert result.exit_code == 2
    assert f"env var: '{name}'" in result.output
    assert not captured


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen-addr", "nowhere"], "--listen-addr must be host:port"),
        (["--metrics-addr", "127.0.0.1:99999"], "--metrics-addr must be host:port"),
        (["--tools", "no_such_module_here"], "cannot import tools module"),
        (["--store", "mysql://db/agenttx"], "unsupported store URL scheme"),
    ],
)
def test_settings_the_server_cannot_use_refuse_to_start(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = invoke("serve", "--data-dir", str(tmp_path / "d"), *args)
    assert result.exit_code == 1
    assert message in result.output


# -- commands against a running server ------------------------------------------------------


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Any]]:
    """A server holding: a committed transaction (agent billing, label nightly) with two
    steps, and an open one (agent support) with three."""
    data_dir = tmp_path_factory.mktemp("cli") / "data"
    server = start_server(data_dir)
    ids: dict[str, str] = {}
    with server.killed_on_error(), server.channel() as channel:
        stub = server.stub(channel)

        def steps(tx: str, n: int) -> None:
            for i in range(1, n + 1):
                stub.ExecuteStep(
                    pb.ExecuteStepRequest(
                        transaction_id=tx,
                        step_id=i,
                        tool_name="kv.put",
                        arguments_json=json.dumps({"key": f"k{i}", "value": i}),
                    )
                )

        begin = stub.BeginTransaction
        ids["committed"] = begin(
            pb.BeginTransactionRequest(agent_id="billing", labels=["nightly"])
        ).transaction_id
        steps(ids["committed"], 2)
        stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=ids["committed"]))
        ids["open"] = begin(pb.BeginTransactionRequest(agent_id="support")).transaction_id
        steps(ids["open"], 3)
    yield server, ids
    assert server.terminate() == 0, server.log_text()


def test_tx_list_prints_a_table(running: tuple[ServerProcess, Any]) -> None:
    server, ids = running
    result = invoke("tx", "list", "--server", server.address)
    assert result.exit_code == 0, result.output
    assert ids["committed"] in result.output
    assert ids["open"] in result.output
    assert "COMMITTED" in result.output
    assert "nightly" in result.output
    result = invoke("tx", "list", "--label", "nightly", "--server", server.address)
    assert result.exit_code == 0, result.output
    assert ids["open"] not in result.output
    assert "1 transaction\n" in result.output


def test_tx_list_filters_by_status_agent_label_and_limit(
    running: tuple[ServerProcess, Any],
) -> None:
    server, ids = running
    env = {"AGENTTX_SERVER": server.address}

    def listed(*args: str) -> list[str]:
        result = invoke("tx", "list", "--json", *args, env=env)
        assert result.exit_code == 0, result.output
        return [t["transaction_id"] for t in json.loads(result.output)]

    assert {ids["committed"], ids["open"]} <= set(listed())
    assert listed("--status", "committed") == [ids["committed"]]
    assert listed("--status", "ACTIVE", "--status", "FAILED") == [ids["open"]]
    assert listed("--agent", "support") == [ids["open"]]
    assert listed("--label", "nightly") == [ids["committed"]]
    assert len(listed("--limit", "1")) == 1


def test_tx_list_json_has_plain_values(running: tuple[ServerProcess, Any]) -> None:
    server, _ = running
    result = invoke("tx", "list", "--json", "--status", "COMMITTED", "--server", server.address)
    (t,) = json.loads(result.output)
    assert t["status"] == "COMMITTED"
    assert t["agent_id"] == "billing"
    assert t["labels"] == ["nightly"]
    assert isinstance(t["revision"], int)


def test_tx_show_prints_facts_and_steps(running: tuple[ServerProcess, Any]) -> None:
    server, ids = running
    result = invoke("tx", "show", ids["open"], "--server", server.address)
    assert result.exit_code == 0, result.output
    assert ids["open"] in result.output
    assert "ACTIVE" in result.output
    assert "max_local_depth=2" in result.output
    assert result.output.count("kv.put") == 3
    assert '{"key":"k3","value":3}' in result.output


def test_tx_show_json_parses_arguments_and_outputs(running: tuple[ServerProcess, Any]) -> None:
    server, ids = running
    result = invoke("tx", "show", ids["committed"], "--json", "--server", server.address)
    assert result.exit_code == 0, result.output
    t = json.loads(result.output)
    assert t["status"] == "COMMITTED"
    assert [s["arguments"] for s in t["steps"]] == [
        {"key": "k1", "value": 1},
        {"key": "k2", "value": 2},
    ]
    assert t["steps"][0]["output"] == {"key": "k1", "value": 1}
    assert t["policy"] == {"max_local_depth": 2, "max_global_resets": 1,
                           "replay_budget_factor": 2.0}  # fmt: skip


def test_tx_rollback_rewinds_then_aborts(running: tuple[ServerProcess, Any]) -> None:
    server, ids = running
    # Module-scoped data: this test runs last among those that read the open transaction.
    result = invoke("tx", "rollback", ids["open"], "--to-step", "2", "--server", server.address)
    assert result.exit_code == 0, result.output
    assert "next step 2" in result.output
    result = invoke("tx", "rollback", ids["open"], "--json", "--server", server.address)
    assert result.exit_code == 0, result.output
    reply = json.loads(result.output)
    assert reply["rolled_back"] is True
    assert reply["next_step_id"] == 0
    assert reply["transaction_status"] == "ROLLED_BACK"


def test_tx_show_of_an_unknown_id_fails_with_the_status(
    running: tuple[ServerProcess, Any],
) -> None:
    server, _ = running
    result = invoke("tx", "show", "tx_nope", "--server", server.address)
    assert result.exit_code == 1
    assert "NOT_FOUND" in result.output


def test_tools_lists_built_in_and_user_tools(running: tuple[ServerProcess, Any]) -> None:
    server, _ = running
    result = invoke("tools", "--server", server.address)
    assert result.exit_code == 0, result.output
    for name in ("kv.put", "fs.write", "effect.stage", "test.sleep"):
        assert name in result.output
    result = invoke("tools", "--json", "--server", server.address)
    tools = {t["name"]: t for t in json.loads(result.output)}
    assert tools["test.call_api"]["effect"] == "compensatable"
    assert tools["test.sleep"]["timeout_ms"] == 60_000
    assert tools["test.sleep"]["input_schema"]["required"] == ["seconds"]


def test_demo_runs_against_a_given_server(running: tuple[ServerProcess, Any]) -> None:
    server, _ = running
    result = invoke("demo", "--server", server.address)
    assert result.exit_code == 0, result.output
    assert "DEPENDENCY_JUMP" in result.output
    assert "committed=True" in result.output


def test_commands_say_when_no_server_answers() -> None:
    result = invoke("tools", "--server", "127.0.0.1:1", "--timeout", "1")
    assert result.exit_code == 1
    assert "cannot reach AgentTx at 127.0.0.1:1" in result.output


# -- demo -----------------------------------------------------------------------------------


def test_demo_runs_through_an_in_process_server(tmp_path: Path) -> None:
    result = invoke("demo", "--dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "ROLLBACK_TRIGGERED" in result.output
    assert "committed=True steps=6 effects released=1" in result.output
    assert "drafts/c-1.json" in result.output
    assert not (tmp_path / "files" / "drafts" / "c-404.json").exists()  # the rewind undid it
    assert len((tmp_path / "outbox.jsonl").read_text().splitlines()) == 1


def _demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``agenttx demo`` as a user runs it, its temporary directories made under ``tmp_path``."""
    return subprocess.run(
        agenttx_command("demo", *args),
        capture_output=True,
        text=True,
        timeout=120,
        env=server_env({"TMPDIR": str(tmp_path), "COLUMNS": "200"}),
        check=False,
    )


def test_demo_removes_its_temporary_data_directory_and_says_so(tmp_path: Path) -> None:
    done = _demo(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(tmp_path.glob("agenttx-demo-*")) == []
    assert f"removed the demo's data directory {tmp_path}/agenttx-demo-" in done.stdout
    assert "(--keep keeps it)" in done.stdout


def test_demo_keep_keeps_the_directory_and_names_it(tmp_path: Path) -> None:
    done = _demo(tmp_path, "--keep")
    assert done.returncode == 0, done.stdout + done.stderr
    (kept,) = tmp_path.glob("agenttx-demo-*")
    assert f"the demo's data is in {kept} " in done.stdout
    assert (kept / "outbox.jsonl").is_file()


def test_demo_dir_and_keep_are_refused_with_a_server() -> None:
    result = invoke("demo", "--server", "127.0.0.1:1", "--keep")
    assert result.exit_code == 2
    assert "leave them out" in result.output
