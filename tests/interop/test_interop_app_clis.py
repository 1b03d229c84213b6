"""``agenttx connect <app> --write`` against the apps' own CLIs, offline, in a temporary HOME:
Claude Code, Gemini CLI and Codex each read the entry it wrote, start it (stdio) or reach it
(streamable HTTP, a real ``agenttx serve --http-addr``) and report AgentTx connected, or list
its tools; each finds the file where its own variable moves it (``CLAUDE_CONFIG_DIR``,
``GEMINI_CLI_HOME``, ``CODEX_HOME``); and each app's own ``mcp add`` writes the same entry.

The test set-up installs each CLI at its pinned version with npm, once, into
``~/.cache/agenttx-tests/`` (docs/connect.md has the sizes and times). Without npm, or with the
registry unreachable, the tests skip with that reason, except under CI, where they fail.

Nothing reaches the network: every app runs with a small environment of its own (HOME and the
XDG directories under the test's temporary directory, none of the developer's variables or
keys) and the switches that stop its update checks, telemetry and plug-in downloads; every
subprocess is bounded, so an app that waited on the network would fail the test, not hang it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

from install_lock import npm_install
from install_lock import unavailable as unavailable_here
from server_process import ServerProcess, start_server


@dataclass(frozen=True)
class Cli:
    package: str
    version: str
    bin: str  # its name in node_modules/.bin
    flags: tuple[str, ...]  # npm install's: the smallest install that still runs


# Current releases on 2026-12-02. None needs an install script: Claude Code's postinstall only
# hard-links its platform package's binary over a stub (run here straight from that package),
# and Gemini CLI's optional dependencies (a pty and the keychain) are not used to list servers.
CLIS = {
    "claude-code": Cli("@anthropic-ai/claude-code", "2.1.332", "claude", ("--ignore-scripts",)),
    "gemini": Cli(
        "@google/gemini-cli", "0.61.0", "gemini", ("--ignore-scripts", "--omit=optional")
    ),
    "codex": Cli("@openai/codex", "0.171.0", "codex", ("--ignore-scripts",)),
}
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agenttx-tests"
AGENTTX = os.path.abspath(Path(sys.executable).parent / "agenttx")
TIMEOUT = 120.0  # each app's run; the slowest took 12 s on a loaded 2-core machine

# Gemini CLI's settings that stop its update check and usage statistics. They go in the user
# settings file `connect --write` then merges into (a system settings file under /tmp is
# refused as insecure), so Gemini also reads a merged file, not only one we created.
GEMINI_OFFLINE = {
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}
# Codex's plug-in marketplace is what looked up github.com and chatgpt.com when its app server
# started (strace, 2026-12-02); nothing else did.
CODEX_OFFLINE = ("--disable", "plugins")


def _unavailable(reason: str) -> NoReturn:
    unavailable_here("the apps' CLIs are", reason)


@functools.cache
def _install(app: str) -> Path:
    cli = CLIS[app]
    prefix = CACHE / f"{app}-cli-{cli.version}"
    problem = npm_install(prefix, f".bin/{cli.bin}", [f"{cli.package}@{cli.version}"], *cli.flags)
    if problem:
        return Path(problem)  # a reason, not a path; cached so each test does not retry
    if app == "claude-code":
        # The one platform package npm chose for this machine (os, cpu, libc) holds the binary.
        found = sorted((prefix / "node_modules" / "@anthropic-ai").glob("claude-code-*/claude"))
        return found[0] if found else Path("no Claude Code binary for this platform")
    return prefix / "node_modules" / ".bin" / cli.bin


def executable(app: str) -> str:
    path = _install(app)
    if not path.is_absolute():
        _unavailable(str(path))
    return str(path)


@dataclass
class Machine:
    """A throw-away home with its own environment: what the apps and `agenttx connect` see."""

    home: Path
    env: dict[str, str]

    @property
    def work(self) -> Path:
        return self.home / "work"  # not HOME itself: Gemini CLI refuses project settings there

    def run(self, words: list[str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                words,
                env=self.env,
                cwd=self.work,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as late:
            # What it said so far (bytes here even with text=True) says what it waited for.
            said = b"".join(
                part if isinstance(part, bytes) else part.encode()
                for part in (late.stdout, late.stderr)
                if part
            )
            pytest.fail(f"{shlex.join(words)}: no end after {timeout}s (the network?): {said!r}")

    def connect(self, app: str, *args: str) -> dict[str, Any]:
        done = self.run([AGENTTX, "connect", app, "--json", *args])
        assert done.returncode == 0, done.stderr
        about: dict[str, Any] = json.loads(done.stdout)
        return about

    def write(self, app: str, *args: str) -> Path:
        """``agenttx connect app --write``; the file it wrote."""
        done = self.run([AGENTTX, "connect", app, "--write", "--json", *args])
        assert done.returncode == 0, done.stderr
        return Path(json.loads(done.stdout)["path"])


def machine_at(home: Path, **moved: str) -> Machine:
    (home / "work").mkdir(parents=True)
    env = {
        "PATH": os.environ["PATH"],  # node, for Gemini CLI and Codex's launcher
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),  # `agenttx mcp`'s default data dir
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
        # Claude Code: no update check, telemetry, error reports or release notes.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # Gemini CLI: trust the working folder (it starts no stdio server elsewhere) and skip
        # re-executing itself with a larger heap, a second Node start-up per run.
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "GEMINI_TELEMETRY_ENABLED": "false",
        **moved,
    }
    gemini_home = Path(moved.get("GEMINI_CLI_HOME", home)) / ".gemini"
    gemini_home.mkdir(parents=True)
    (gemini_home / "settings.json").write_text(json.dumps(GEMINI_OFFLINE, indent=2))
    return Machine(home, env)


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return machine_at(tmp_path / "home")


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The streamable-HTTP endpoint of one real `agenttx serve --http-addr` for the module."""
    server: ServerProcess = start_server(
        tmp_path_factory.mktemp("served") / "data", "--http-addr", "127.0.0.1:0"
    )
    with server.killed_on_error():
        [record] = [r for r in server.log_records() if r.get("event") == "serving"]
        yield str(record["mcp_http"])
    assert server.terminate() == 0


def launch_args(form: str, request: pytest.FixtureRequest) -> tuple[str, ...]:
    return ("--http", request.getfixturevalue("http_url")) if form == "http" else ()


def output(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


# ---------------------------------------------------------------- each app reports us connected


@pytest.mark.parametrize("form", ["stdio", "http"])
def test_claude_code_lists_agenttx_connected(
    form: str, machine: Machine, request: pytest.FixtureRequest
) -> None:
    args = launch_args(form, request)
    written = machine.write("claude-code", *args)
    assert written == machine.home / ".claude.json"
    # `claude mcp list` health-checks every server: it starts ours, or connects to the URL,
    # and speaks MCP to it.
    listed = machine.run([executable("claude-code"), "mcp", "list"])
    out = output(listed)
    assert listed.returncode == 0, out
    where = f"{args[1]} (HTTP)" if args else f"{AGENTTX} mcp --data-dir"
    [line] = [line for line in out.splitlines() if line.startswith("agenttx: ")]
    assert line.startswith(f"agenttx: {where}"), out
    assert line.endswith("✔ Connected"), out


@pytest.mark.parametrize("form", ["stdio", "http"])
def test_gemini_lists_agenttx_connected(
    form: str, machine: Machine, request: pytest.FixtureRequest
) -> None:
    args = launch_args(form, request)
    written = machine.write("gemini", *args)
    settings = json.loads(written.read_text())
    assert settings["general"] == GEMINI_OFFLINE["general"]  # the merge kept the user's keys
    listed = machine.run([executable("gemini"), "mcp", "list"])
    out = output(listed)
    assert listed.returncode == 0, out
    where = f"{args[1]} (http)" if args else f"{AGENTTX} mcp --data-dir"
    [line] = [line for line in out.splitlines() if "agenttx: " in line]
    assert f"agenttx: {where}" in line, out
    assert line.endswith("(stdio) - Connected" if not args else "(http) - Connected"), out


@pytest.mark.parametrize("form", ["stdio", "http"])
async def test_codex_lists_agenttx_and_its_tools(
    form: str, machine: Machine, request: pytest.FixtureRequest
) -> None:
    args = launch_args(form, request)
    machine.write("codex", *args)
    codex = executable("codex")
    listed = machine.run([codex, "mcp", "list", "--json"])
    assert listed.returncode == 0, output(listed)
    [entry] = [e for e in json.loads(listed.stdout) if e["name"] == "agenttx"]
    assert entry["enabled"] is True
    transport = entry["transport"]
    if args:
        assert transport == {**transport, "type": "streamable_http", "url": args[1]}
    else:
        assert transport["type"] == "stdio"
        assert transport["command"] == AGENTTX
        assert transport["args"][0] == "mcp"
    # `codex mcp list` only reads the file. Codex's app server (the protocol its IDE extension
    # and app speak) starts the configured servers and reports each one's tools.
    status = await codex_server_status(machine, codex)
    [ours] = [s for s in status if s["name"] == "agenttx"]
    assert ours["serverInfo"]["name"] == "agenttx", ours
    assert ours.get("toolsError") is None, ours
    assert {"begin_transaction", "run_step", "commit_transaction"} <= set(ours["tools"]), ours


async def codex_server_status(machine: Machine, codex: str) -> list[dict[str, Any]]:
    """`mcpServerStatus/list` over `codex app-server`'s JSON-RPC on stdio."""
    log = machine.home / "codex-app-server.log"  # a file: a full stderr pipe would stall it
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            codex,
            *CODEX_OFFLINE,
            "app-server",
            env=machine.env,
            cwd=machine.work,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            limit=16 * 1024 * 1024,  # one line carries every server's tools and their schemas
        )
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None
    assert stdout is not None

    async def ask(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request = {"id": request_id, "method": method, "params": params}
        stdin.write(json.dumps(request).encode() + b"\n")
        await stdin.drain()
        while True:  # notifications (config warnings, status changes) come in between
            line = await stdout.readline()
            assert line, f"codex app-server closed its output; it said: {log.read_text()}"
            message = json.loads(line)
            if message.get("id") == request_id:
                assert "result" in message, message
                result: dict[str, Any] = message["result"]
                return result

    try:
        async with asyncio.timeout(TIMEOUT):
            await ask(1, "initialize", {"clientInfo": {"name": "agenttx-tests", "version": "0"}})
            stdin.write(b'{"method": "initialized"}\n')
            status = await ask(2, "mcpServerStatus/list", {"detail": "toolsAndAuthOnly"})
    except TimeoutError:
        pytest.fail(f"codex app-server gave no answer in {TIMEOUT}s:\n{log.read_text()}")
    finally:
        stdin.close()  # it exits at the end of its input
        try:
            async with asyncio.timeout(30):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
    data: list[dict[str, Any]] = status["data"]
    return data


# ---------------------------------------------------------------- where each app's variable puts it

MOVED_BY = {  # the variable, the file under it, the file under HOME when it is not set
    "claude-code": ("CLAUDE_CONFIG_DIR", ".claude.json", ".claude.json"),
    "gemini": ("GEMINI_CLI_HOME", ".gemini/settings.json", ".gemini/settings.json"),
    "codex": ("CODEX_HOME", "config.toml", ".codex/config.toml"),
}


@pytest.mark.parametrize("app", sorted(MOVED_BY))
def test_each_app_reads_the_file_where_its_variable_moves_it(app: str, tmp_path: Path) -> None:
    variable, name, unmoved = MOVED_BY[app]
    moved = tmp_path / "moved"
    machine = machine_at(tmp_path / "home", **{variable: str(moved)})
    assert machine.write(app) == moved / name
    if app == "claude-code":
        got = machine.run([executable(app), "mcp", "get", "agenttx"])
        assert "Scope: User config" in output(got), output(got)
        assert f"Command: {AGENTTX}" in output(got), output(got)
    elif app == "gemini":
        got = machine.run([executable(app), "mcp", "list"])
        assert f"agenttx: {AGENTTX} mcp" in output(got), output(got)
    else:
        got = machine.run([executable(app), "mcp", "get", "agenttx", "--json"])
        assert got.returncode == 0, output(got)
        assert json.loads(got.stdout)["transport"]["command"] == AGENTTX
    assert not (machine.home / unmoved).exists()


# ---------------------------------------------------------------- the apps' own `mcp add`


def written_entry(app: str, machine: Machine) -> dict[str, Any]:
    if app == "codex":
        table = tomllib.loads((machine.home / ".codex" / "config.toml").read_text())
        entry = table["mcp_servers"]
    elif app == "claude-code":
        entry = json.loads((machine.home / ".claude.json").read_text())["mcpServers"]
    else:
        entry = json.loads((machine.home / ".gemini" / "settings.json").read_text())["mcpServers"]
    found: dict[str, Any] = entry["agenttx"]
    return found


@pytest.mark.parametrize("form", ["stdio", "http"])
@pytest.mark.parametrize("app", sorted(CLIS))
def test_the_printed_command_writes_the_entry_write_writes(
    app: str, form: str, tmp_path: Path
) -> None:
    url = "http://127.0.0.1:8080/mcp"  # only written and compared, never reached
    args = ("--http", url) if form == "http" else ()
    theirs, ours = machine_at(tmp_path / "theirs"), machine_at(tmp_path / "ours")

    about = theirs.connect(app, *args)
    words = shlex.split(about["command_line"])
    assert words[0] == CLIS[app].bin
    added = theirs.run([executable(app), *words[1:]])
    assert added.returncode == 0, output(added)
    ours.write(app, *args)

    their_entry, our_entry = written_entry(app, theirs), written_entry(app, ours)
    assert our_entry == ours.connect(app, *args)["entry"]
    if app == "claude-code" and form == "stdio":
        assert their_entry.pop("env") == {}  # `claude mcp add` writes an empty env; we leave it out
    if app == "gemini" and form == "http":
        # `gemini mcp add` writes url + type; the documented httpUrl is what we write. Both are
        # streamable HTTP to Gemini CLI (test_gemini_lists_agenttx_connected has it reach ours).
        assert their_entry == {"url": url, "type": "http"}
        assert our_entry == {"httpUrl": url}
        return
    # The data directory is under each run's own HOME; the rest is the same word for word.
    their_text = json.dumps(their_entry).replace(str(theirs.home), "HOME")
    assert their_text == json.dumps(our_entry).replace(str(ours.home), "HOME")
