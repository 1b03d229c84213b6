"""``agenttx connect`` against the apps' own CLIs: the command it prints for Claude Code, Codex
and Gemini CLI, run for real in a temporary HOME, writes the entry ``--write`` writes, and each
app reads back the entry ``--write`` wrote — and, where this build has ``agenttx mcp``, Claude
Code and Gemini CLI start it from that entry and report it connected.

The CLIs come from npm at the pinned versions below, installed once into this environment
(``<venv>/app-clis``). They weigh about 1.7 GB with their native binaries, so the suite is
opt-in: ``AGENTTX_APP_CLIS=1 .venv/bin/pytest tests/test_connect_app_clis.py``. docs/connect.md
records the last run.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from install_lock import installing

PINS = {
    "@anthropic-ai/claude-code": "2.1.332",
    "@openai/codex": "0.171.0",
    "@google/gemini-cli": "0.61.0",
}
PREFIX = Path(sys.prefix) / "app-clis"
AGENTTX = os.path.abspath(Path(sys.executable).parent / "agenttx")
URL = "http://127.0.0.1:8080/mcp"


@functools.cache
def has_mcp() -> bool:
    """Whether this build has `agenttx mcp`: then the apps' own health checks must reach it."""
    done = subprocess.run(
        [AGENTTX, "mcp", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode == 0


pytestmark = pytest.mark.skipif(
    os.environ.get("AGENTTX_APP_CLIS") != "1",
    reason="opt-in: AGENTTX_APP_CLIS=1 installs the apps' CLIs from npm (~1.7 GB)",
)


@pytest.fixture(scope="module")
def clis() -> Path:
    """The apps' CLIs' bin directory, installed at the pinned versions."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("AGENTTX_APP_CLIS=1 needs npm (Node.js 20 or later)")
    wanted = [f"{name}@{version}" for name, version in PINS.items()]
    with installing(PREFIX):
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(PREFIX), *wanted],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    return PREFIX / "node_modules" / ".bin"


def run(words: list[str], home: Path, clis: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTTX_", "CLAUDE_"))},
        "HOME": str(home),
        "PATH": f"{clis}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("CODEX_HOME", None)
    work = home / "work"  # not HOME itself: Gemini refuses project settings there
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        words, env=env, cwd=work, capture_output=True, text=True, timeout=180, check=False
    )


def connect(app: str, home: Path, clis: Path, *args: str) -> dict[str, Any]:
    done = run([AGENTTX, "connect", app, "--json", *args], home, clis)
    assert done.returncode == 0, done.stderr
    about: dict[str, Any] = json.loads(done.stdout)
    return about


def write(app: str, home: Path, clis: Path, *args: str) -> None:
    done = run([AGENTTX, "connect", app, "--write", *args], home, clis)
    assert done.returncode == 0, done.stderr


def written_entry(app: str, home: Path) -> dict[str, Any]:
    if app == "codex":
        entry = tomllib.loads((home / ".codex" / "config.toml").read_text())["mcp_servers"]
    elif app == "claude-code":
        entry = json.loads((home / ".claude.json").read_text())["mcpServers"]
    else:
        entry = json.loads((home / ".gemini" / "settings.json").read_text())["mcpServers"]
    found: dict[str, Any] = entry["agenttx"]
    return found


@pytest.mark.parametrize("form", ["stdio", "http"])
@pytest.mark.parametrize("app", ["claude-code", "codex", "gemini"])
def test_the_printed_command_writes_the_entry_write_writes(
    app: str, form: str, tmp_path: Path, clis: Path
) -> None:
    args = ("--http", URL) if form == "http" else ()
    theirs_home, ours_home = tmp_path / "theirs", tmp_path / "ours"

    about = connect(app, theirs_home, clis, *args)
    added = run(shlex.split(about["command_line"]), theirs_home, clis)
    assert added.returncode == 0, added.stdout + added.stderr
    write(app, ours_home, clis, *args)

    theirs, ours = written_entry(app, theirs_home), written_entry(app, ours_home)
    assert ours == connect(app, ours_home, clis, *args)["entry"]
    if app == "claude-code" and form == "stdio":
        assert theirs.pop("env") == {}  # `claude mcp add` writes an empty env; we leave it out
    if app == "gemini" and form == "http":
        # `gemini mcp add` writes url + type; the documented httpUrl is what we write. Both
        # are streamable HTTP to Gemini CLI (the next test has it read ours).
        assert theirs == {"url": URL, "type": "http"}
        assert ours == {"httpUrl": URL}
        return
    # The data directory is under each run's own HOME; the rest is the same word for word.
    theirs_text = json.dumps(theirs).replace(str(theirs_home), "HOME")
    assert theirs_text == json.dumps(ours).replace(str(ours_home), "HOME")


@pytest.mark.parametrize("form", ["stdio", "http"])
def test_codex_reads_our_entry(form: str, tmp_path: Path, clis: Path) -> None:
    args = ("--http", URL) if form == "http" else ()
    write("codex", tmp_path, clis, *args)
    got = run(["codex", "mcp", "get", "agenttx", "--json"], tmp_path, clis)
    assert got.returncode == 0, got.stderr
    transport = json.loads(got.stdout)["transport"]
    if form == "http":
        assert transport["type"] == "streamable_http"
        assert transport["url"] == URL
    else:
        assert transport["type"] == "stdio"
        assert transport["command"] == AGENTTX
        assert transport["args"][0] == "mcp"


@pytest.mark.parametrize("form", ["stdio", "http"])
def test_claude_code_reads_our_entry_as_user_scope(form: str, tmp_path: Path, clis: Path) -> None:
    args = ("--http", URL) if form == "http" else ()
    write("claude-code", tmp_path, clis, *args)
    got = run(["claude", "mcp", "get", "agenttx"], tmp_path, clis)
    out = got.stdout + got.stderr
    assert "Scope: User config" in out, out
    assert (f"URL: {URL}" if form == "http" else f"Command: {AGENTTX}") in out, out
    if form == "stdio" and has_mcp():  # Claude Code started our entry and spoke MCP to it
        assert "Status: ✔ Connected" in out, out


@pytest.mark.parametrize("form", ["stdio", "http"])
def test_gemini_lists_our_entry(form: str, tmp_path: Path, clis: Path) -> None:
    args = ("--http", URL) if form == "http" else ()
    write("gemini", tmp_path, clis, *args)
    # Gemini CLI starts stdio servers only for a trusted folder (its own trust list).
    trusted = {str(tmp_path / "work"): "TRUST_FOLDER"}
    (tmp_path / ".gemini" / "trustedFolders.json").write_text(json.dumps(trusted))
    got = run(["gemini", "mcp", "list"], tmp_path, clis)
    out = got.stdout + got.stderr
    assert (f"agenttx: {URL} (http)" if form == "http" else f"agenttx: {AGENTTX} mcp") in out, out
    if form == "stdio" and has_mcp():
        assert "(stdio) - Connected" in out, out
