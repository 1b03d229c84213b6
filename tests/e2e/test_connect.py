"""``agenttx connect``: each app's configuration printed in its own format, and ``--write``
merging one entry into a seeded user config in a temporary HOME — other servers and settings
kept (TOML comments too), a backup of the old bytes beside it, idempotent, atomic, and a file
that does not parse left exactly as it was.

Everything runs on real files; the run through the installed ``agenttx`` executable is a real
subprocess.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agenttx.cli import main
from agenttx.cli.connect import apps as apps_module
from agenttx.cli.connect import config_file
from agenttx.cli.connect.apps import APPS, Host, Http, Stdio
from agenttx.cli.connect.launch import (
    MAX_URL_BYTES,
    LaunchError,
    default_data_dir,
    find_executable,
    http_launch,
)

EXECUTABLE = os.path.abspath(Path(sys.executable).parent / "agenttx")

# Each app's seeded user config: another server the user had, and settings of the app's own.
SEEDS: dict[str, str] = {
    "claude-code": json.dumps(
        {
            "numStartups": 12,
            "mcpServers": {"github": {"type": "stdio", "command": "npx", "args": ["-y", "gh"]}},
            "projects": {"/src/app": {"mcpServers": {}, "allowedTools": ["Bash"]}},
        },
        indent=2,
    ),
    "codex": (
        "# Codex settings, by hand\n"
        'model = "o3"  # the one I like\n'
        "\n"
        "[mcp_servers.docs]\n"
        'command = "npx"   # keep this comment\n'
        'args = ["-y", "docs-mcp"]\n'
        "\n"
        "[profiles.fast]\n"
        'model = "mini"\n'
    ),
    "claude-desktop": json.dumps(
        {"mcpServers": {"fs": {"command": "npx", "args": ["fs"]}}, "globalShortcut": "Ctrl+Space"},
        indent=2,
    ),
    "cursor": json.dumps({"mcpServers": {"web": {"url": "https://example.com/mcp"}}}, indent=4),
    "vscode": json.dumps(
        {
            "inputs": [{"type": "promptString", "id": "key", "password": True}],
            "servers": {"fetch": {"type": "stdio", "command": "uvx", "args": ["fetch"]}},
        },
        indent="\t",
    ),
    "gemini": json.dumps(
        {"theme": "GitHub", "mcpServers": {"py": {"command": "python", "args": ["s.py"]}}},
        indent=2,
    ),
    "windsurf": json.dumps({"mcpServers": {"gh": {"serverUrl": "https://gh.example/mcp"}}}),
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary HOME, and a project folder inside it as the working directory."""
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for moved in (
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
        "GEMINI_CLI_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
    ):
        monkeypatch.delenv(moved, raising=False)
    monkeypatch.chdir(home / "project")
    return home


def host_of(home: Path) -> Host:
    return Host(home=home, environ={}, platform=sys.platform, cwd=home / "project")


def config_path(app: str, home: Path) -> Path:
    return Path(APPS[app].config_path(host_of(home)))


def seed(app: str, home: Path) -> Path:
    path = config_path(app, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SEEDS[app], encoding="utf-8")
    return path


def parse(app: str, text: str) -> Any:
    return tomllib.loads(text) if APPS[app].format == "toml" else json.loads(text)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, ["connect", *args])


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".agenttx-backup-*"))


def stdio_entry(app: str, args: list[str]) -> dict[str, Any]:
    return APPS[app].entry(Stdio(EXECUTABLE, tuple(args)))


# ---------------------------------------------------------------- --write on every app


@pytest.mark.parametrize("app", list(APPS))
def test_write_merges_the_entry_keeping_everything_else_with_a_backup(app: str, home: Path) -> None:
    path = seed(app, home)
    before = parse(app, SEEDS[app])
    key = APPS[app].key

    result = invoke(app, "--write")

    assert result.exit_code == 0, result.output
    assert "Added" in result.output
    after = parse(app, path.read_text("utf-8"))
    data_dir = str(home / ".local" / "share" / "agenttx") if sys.platform == "linux" else None
    entry = after[key]["agenttx"]
    assert entry["command"] == EXECUTABLE
    assert entry["args"][0] == "mcp"
    if data_dir:
        assert entry["args"] == ["mcp", "--data-dir", data_dir]
    assert entry == stdio_entry(app, entry["args"])
    # Everything that was there is still there, equal.
    del after[key]["agenttx"]
    assert after == before
    (backup,) = backups(path)
    assert backup.read_text("utf-8") == SEEDS[app]
    assert not list(path.parent.glob(f".{path.name}.*.tmp"))  # no temporary file left


@pytest.mark.parametrize("app", list(APPS))
def test_write_is_idempotent_one_entry_no_new_backup(app: str, home: Path) -> None:
    path = seed(app, home)
    assert invoke(app, "--write").exit_code == 0
    written = path.read_bytes()

    for _ in range(2):
        again = invoke(app, "--write")
        assert again.exit_code == 0, again.output
        assert "Already up to date" in again.output

    assert path.read_bytes() == written
    assert len(backups(path)) == 1
    servers = parse(app, written.decode())[APPS[app].key]
    assert [name for name in servers if name == "agenttx"] == ["agenttx"]


def test_codex_toml_keeps_comments_and_layout_byte_for_byte(home: Path) -> None:
    path = seed("codex", home)
    assert invoke("codex", "--write").exit_code == 0
    text = path.read_text("utf-8")
    args = tomllib.loads(text)["mcp_servers"]["agenttx"]["args"]
    # Our table sits with the other servers; the user's text is untouched around it.
    ours = f"[mcp_servers.agenttx]\ncommand = {json.dumps(EXECUTABLE)}\nargs = {json.dumps(args)}\n"
    head, tail = SEEDS["codex"].split("[profiles.fast]\n")
    assert text == head + ours + "\n[profiles.fast]\n" + tail


def test_write_creates_a_missing_file_and_its_folders_without_a_backup(home: Path) -> None:
    path = config_path("windsurf", home)
    assert not path.parent.exists()
    result = invoke("windsurf", "--write")
    assert result.exit_code == 0, result.output
    assert "Created" in result.output
    doc = json.loads(path.read_text("utf-8"))
    assert list(doc) == ["mcpServers"]
    assert doc["mcpServers"]["agenttx"]["command"] == EXECUTABLE
    assert backups(path) == []


def test_an_empty_file_counts_as_an_empty_object(home: Path) -> None:
    path = config_path("claude-desktop", home)
    path.parent.mkdir(parents=True)
    path.write_text("\n")
    assert invoke("claude-desktop", "--write").exit_code == 0
    assert list(json.loads(path.read_text())["mcpServers"]) == ["agenttx"]


@pytest.mark.parametrize(
    ("app", "text", "reason"),
    [
        ("cursor", '{"mcpServers": {}, // mine\n}', "not valid JSON at line 1 column"),
        ("vscode", '{"servers": {"a": {"command": "x",}}}', "not valid JSON"),
        ("gemini", '{"mcpServers": {"a": {}}, "mcpServers": {}}', "'mcpServers' appears twice"),
        ("claude-code", '["not", "an", "object"]', "top level is a JSON list"),
        ("windsurf", '{"mcpServers": ["x"]}', "'mcpServers' is a JSON list, not an object"),
        ("codex", "[mcp_servers\ncommand = 1\n", "not valid TOML"),
        ("codex", 'mcp_servers = "none"\n', "'mcp_servers' is a TOML str, not a table"),
    ],
)
def test_a_file_that_cannot_be_read_is_refused_and_left_as_it_was(
    app: str, text: str, reason: str, home: Path
) -> None:
    path = config_path(app, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")

    result = invoke(app, "--write")

    assert result.exit_code == 1
    assert str(path) in result.output
    assert reason in result.output
    assert "nothing was changed" in result.output
    assert path.read_text("utf-8") == text
    left = {p.name for p in path.parent.iterdir()} - {"project"}
    assert left == {path.name}  # no backup, no temporary file


def test_a_rewrite_keeps_the_users_own_keys_in_our_entry_and_drops_stale_transport(
    home: Path,
) -> None:
    path = config_path("gemini", home)
    path.parent.mkdir(parents=True)
    old = {"url": "http://old/sse", "type": "sse", "timeout": 5000, "trust": True}
    path.write_text(json.dumps({"mcpServers": {"agenttx": old}}))

    result = invoke("gemini", "--write")

    assert result.exit_code == 0, result.output
    assert "Updated" in result.output
    entry = json.loads(path.read_text())["mcpServers"]["agenttx"]
    assert entry["timeout"] == 5000
    assert entry["trust"] is True
    assert "url" not in entry
    assert "type" not in entry
    assert entry["command"] == EXECUTABLE


def test_codex_rewrite_edits_our_table_in_place_keeping_its_comments(home: Path) -> None:
    path = config_path("codex", home)
    path.parent.mkdir(parents=True)
    path.write_text(
        "[mcp_servers.agenttx]\n"
        "# my note on agenttx\n"
        'command = "/old/agenttx"\n'
        "startup_timeout_sec = 20  # slow disk\n"
    )
    assert invoke("codex", "--http", "http://127.0.0.1:8080/mcp", "--write").exit_code == 0
    text = path.read_text()
    assert "# my note on agenttx" in text
    assert "startup_timeout_sec = 20  # slow disk" in text
    assert tomllib.loads(text)["mcp_servers"]["agenttx"] == {
        "startup_timeout_sec": 20,
        "url": "http://127.0.0.1:8080/mcp",
    }


def test_a_symlinked_config_is_written_through_and_keeps_its_mode(home: Path) -> None:
    real = home / "dotfiles" / "claude.json"
    real.parent.mkdir()
    real.write_text(SEEDS["claude-code"])
    real.chmod(0o600)
    link = config_path("claude-code", home)
    link.symlink_to(real)

    assert invoke("claude-code", "--write").exit_code == 0

    assert link.is_symlink()
    assert "agenttx" in json.loads(real.read_text())["mcpServers"]
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    (backup,) = backups(real)
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600


def test_a_write_by_the_app_meanwhile_is_merged_not_overwritten(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app saves its file after we read it: our merge starts over from its new text."""
    path = seed("claude-code", home)
    real_write_temp = config_file._write_temp
    calls = 0

    def app_saves_meanwhile(target: Path, data: bytes, *, mode: int) -> Path:
        nonlocal calls
        calls += 1
        if calls == 1:  # a real write of the file, between our read and our rename
            doc = json.loads(path.read_text())
            doc["numStartups"] = 13
            path.write_text(json.dumps(doc, indent=2))
        return real_write_temp(target, data, mode=mode)

    monkeypatch.setattr(config_file, "_write_temp", app_saves_meanwhile)
    assert invoke("claude-code", "--write").exit_code == 0
    doc = json.loads(path.read_text())
    assert calls == 2
    assert doc["numStartups"] == 13
    assert "agenttx" in doc["mcpServers"]
    assert "github" in doc["mcpServers"]
    (backup,) = backups(path)
    assert json.loads(backup.read_text())["numStartups"] == 13


def test_vscode_writes_into_the_current_folder(home: Path) -> None:
    assert invoke("vscode", "--write").exit_code == 0
    doc = json.loads((home / "project" / ".vscode" / "mcp.json").read_text())
    assert doc["servers"]["agenttx"]["type"] == "stdio"


# ---------------------------------------------------------------- printed configuration


@pytest.mark.parametrize("app", list(APPS))
def test_the_printed_snippet_parses_to_exactly_the_entry(app: str, home: Path) -> None:
    result = invoke(app, "--json")
    assert result.exit_code == 0, result.output
    about = json.loads(result.output)
    assert about["config_path"] == str(config_path(app, home))
    expected = {APPS[app].key: {"agenttx": about["entry"]}}
    assert parse(app, about["snippet"]) == expected
    # The text output shows the same snippet, verbatim.
    text = invoke(app).output
    assert about["snippet"].rstrip("\n") in text
    assert str(config_path(app, home)) in text


@pytest.mark.parametrize("app", [a for a in APPS if a != "claude-desktop"])
def test_the_http_form_of_each_app(app: str, home: Path) -> None:
    result = invoke(app, "--http", "http://127.0.0.1:8080", "--json")
    assert result.exit_code == 0, result.output
    entry = json.loads(result.output)["entry"]
    url = "http://127.0.0.1:8080/mcp"  # a bare address gets the path serve uses
    expected = {
        "claude-code": {"type": "http", "url": url},
        "codex": {"url": url},
        "cursor": {"url": url},
        "vscode": {"type": "http", "url": url},
        "gemini": {"httpUrl": url},
        "windsurf": {"serverUrl": url},
    }[app]
    assert entry == expected


def test_claude_desktop_has_no_http_form_and_says_what_to_use(home: Path) -> None:
    result = invoke("claude-desktop", "--http", "http://127.0.0.1:8080/mcp", "--write")
    assert result.exit_code == 2
    assert "--server HOST:PORT" in result.output
    assert not config_path("claude-desktop", home).exists()


def test_the_apps_own_commands_are_well_formed(home: Path) -> None:
    def command(app: str, *args: str) -> list[str]:
        about = json.loads(invoke(app, "--json", *args).output)
        assert shlex.split(about["command_line"]) == about["command"]
        words: list[str] = about["command"]
        return words

    data_dir = str(home / "d")
    launch = [EXECUTABLE, "mcp", "--data-dir", data_dir]
    assert command("claude-code", "--data-dir", data_dir) == [
        *["claude", "mcp", "add", "--scope", "user", "agenttx", "--"],
        *launch,
    ]
    assert command("codex", "--data-dir", data_dir) == [
        *["codex", "mcp", "add", "agenttx", "--"],
        *launch,
    ]
    # Gemini: the command, then every argument after `--` so its flags are not Gemini's.
    assert command("gemini", "--data-dir", data_dir) == [
        *["gemini", "mcp", "add", "--scope", "user", "agenttx", EXECUTABLE, "--"],
        *launch[1:],
    ]
    url = "http://127.0.0.1:8080/mcp"
    assert command("claude-code", "--http", url) == [
        *["claude", "mcp", "add", "--scope", "user", "--transport", "http", "agenttx", url]
    ]
    assert command("codex", "--http", url) == ["codex", "mcp", "add", "agenttx", "--url", url]
    assert command("gemini", "--http", url) == [
        *["gemini", "mcp", "add", "--scope", "user", "--transport", "http", "agenttx", url]
    ]
    vscode = command("vscode", "--data-dir", data_dir)
    assert vscode[:2] == ["code", "--add-mcp"]
    assert json.loads(vscode[2]) == {
        "name": "agenttx",
        "type": "stdio",
        "command": EXECUTABLE,
        "args": launch[1:],
    }
    for app in ("cursor", "windsurf", "claude-desktop"):
        assert json.loads(invoke(app, "--json").output)["command"] is None


def test_connect_alone_lists_every_app_and_what_it_would_get(home: Path) -> None:
    result = invoke()
    assert result.exit_code == 0, result.output
    for app in APPS:
        assert app in result.output
        assert str(config_path(app, home)) in result.output
    listing = json.loads(invoke("--json").output)
    assert [row["app"] for row in listing["apps"]] == list(APPS)
    assert all(row["entry"]["command"] == EXECUTABLE for row in listing["apps"])


def test_connect_alone_with_http_marks_the_app_without_an_http_form(home: Path) -> None:
    listing = json.loads(invoke("--http", "http://127.0.0.1:8080/mcp", "--json").output)
    refused = [row["app"] for row in listing["apps"] if "refused" in row]
    assert refused == ["claude-desktop"]


def test_an_unknown_app_is_refused_with_the_list(home: Path) -> None:
    result = invoke("claude", "--write")
    assert result.exit_code == 2
    assert "unknown app 'claude'" in result.output
    for app in APPS:
        assert app in result.output
    assert list(home.iterdir()) == [home / "project"]  # nothing written anywhere


def test_write_without_an_app_is_refused(home: Path) -> None:
    result = invoke("--write")
    assert result.exit_code == 2
    assert "--write needs an APP" in result.output


# ---------------------------------------------------------------- what the entry launches


def test_options_pass_through_to_agenttx_mcp_as_absolute_paths(home: Path) -> None:
    about = json.loads(
        invoke(
            "cursor",
            "--json",
            "--data-dir",
            "data",
            "--store",
            "sqlite:///db/agenttx.db",
            "--fs-root",
            "~/sandbox",
            "--tools",
            "mytools:TOOLS",
            "--",
            "--max-local-depth",
            "3",
        ).output
    )
    cwd = home / "project"
    assert about["entry"]["args"] == [
        *["mcp", "--data-dir", str(cwd / "data")],
        *["--store", f"sqlite:///{cwd / 'db' / 'agenttx.db'}"],
        *["--fs-root", str(home / "sandbox")],
        *["--tools", "mytools:TOOLS"],
        *["--max-local-depth", "3"],
    ]


def test_server_drives_a_running_agenttx_and_refuses_engine_options(home: Path) -> None:
    about = json.loads(invoke("claude-desktop", "--server", "127.0.0.1:50051", "--json").output)
    assert about["entry"] == {"command": EXECUTABLE, "args": ["mcp", "--server", "127.0.0.1:50051"]}
    both = invoke("claude-desktop", "--server", "127.0.0.1:50051", "--data-dir", "x")
    assert both.exit_code == 2
    assert "drop --data-dir" in both.output
    for bad in ("127.0.0.1", "host:0", "host:99999", ":50051"):
        result = invoke("cursor", "--server", bad)
        assert result.exit_code == 2, bad
        assert "not host:port" in result.output


@pytest.mark.parametrize(
    "url",
    ["ftp://host/mcp", "http:///mcp", "http://host:port/mcp", "http://host/m cp", "127.0.0.1:8080"],
)
def test_a_bad_http_url_is_refused(url: str, home: Path) -> None:
    result = invoke("cursor", "--http", url)
    assert result.exit_code == 2
    assert "--http" in result.output


def test_http_url_limit_in_bytes() -> None:
    base = "http://127.0.0.1:8080/mcp?"
    http_launch(base + "a" * (MAX_URL_BYTES - len(base)))
    with pytest.raises(LaunchError, match=f"longer than {MAX_URL_BYTES} bytes"):
        http_launch(base + "é" * ((MAX_URL_BYTES - len(base)) // 2 + 1))  # 2 bytes each
    assert http_launch("https://agenttx.example/custom/path").url.endswith("/custom/path")


def test_http_refuses_launch_options(home: Path) -> None:
    result = invoke("cursor", "--http", "http://127.0.0.1:8080/mcp", "--data-dir", "x")
    assert result.exit_code == 2
    assert "drop --data-dir" in result.output


def test_find_executable_prefers_the_running_command_then_the_interpreters_bin(
    tmp_path: Path,
) -> None:
    running = tmp_path / "pipx" / "agenttx"
    running.parent.mkdir()
    running.write_text("#!/bin/sh\n")
    running.chmod(0o755)
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    beside = bin_dir / "agenttx"
    beside.write_text("#!/bin/sh\n")
    beside.chmod(0o755)
    python = str(bin_dir / "python")

    assert find_executable(str(running), python, lambda _: None) == str(running)
    assert find_executable("/usr/bin/pytest", python, lambda _: None) == str(beside)
    beside.unlink()
    assert find_executable("pytest", python, lambda _: str(running)) == str(running)
    with pytest.raises(LaunchError, match="cannot find the installed `agenttx`"):
        find_executable("pytest", python, lambda _: None)


def test_each_platforms_paths() -> None:
    def path(app: str, platform: str, **environ: str) -> str:
        home = r"C:\Users\ada" if platform == "win32" else "/home/ada"
        host = Host(home=Path(home), environ=environ, platform=platform, cwd=Path("/w"))
        return str(APPS[app].config_path(host))

    desktop = "claude_desktop_config.json"
    assert path("claude-desktop", "darwin") == (
        f"/home/ada/Library/Application Support/Claude/{desktop}"
    )
    assert path("claude-desktop", "win32", APPDATA=r"C:\Users\ada\AppData\Roaming") == (
        rf"C:\Users\ada\AppData\Roaming\Claude\{desktop}"
    )
    assert path("claude-desktop", "win32") == rf"C:\Users\ada\AppData\Roaming\Claude\{desktop}"
    assert path("claude-desktop", "linux") == f"/home/ada/.config/Claude/{desktop}"
    assert path("claude-desktop", "linux", XDG_CONFIG_HOME="/cfg") == f"/cfg/Claude/{desktop}"
    assert path("claude-code", "linux") == "/home/ada/.claude.json"
    assert path("claude-code", "linux", CLAUDE_CONFIG_DIR="/c") == "/c/.claude.json"
    assert path("codex", "linux") == "/home/ada/.codex/config.toml"
    assert path("codex", "linux", CODEX_HOME="/cx") == "/cx/config.toml"
    assert path("cursor", "win32") == r"C:\Users\ada\.cursor\mcp.json"
    assert path("gemini", "darwin") == "/home/ada/.gemini/settings.json"
    assert path("gemini", "linux", GEMINI_CLI_HOME="/g") == "/g/.gemini/settings.json"
    assert path("gemini", "win32", GEMINI_CLI_HOME=r"D:\g") == r"D:\g\.gemini\settings.json"
    assert path("windsurf", "linux") == "/home/ada/.codeium/windsurf/mcp_config.json"
    assert path("vscode", "linux") == "/w/.vscode/mcp.json"


def test_the_default_data_dir_is_per_user() -> None:
    def of(platform: str, **environ: str) -> Path:
        return default_data_dir(
            Host(home=Path("/h"), environ=environ, platform=platform, cwd=Path("/w"))
        )

    assert of("linux") == Path("/h/.local/share/agenttx")
    assert of("linux", XDG_DATA_HOME="/data") == Path("/data/agenttx")
    assert of("darwin") == Path("/h/Library/Application Support/AgentTx")
    assert of("win32", LOCALAPPDATA="/L") == Path("/L/AgentTx")


def test_the_windows_command_line_is_quoted_for_cmd() -> None:
    words = apps_module.APPS["codex"].add_command
    assert words is not None
    line = apps_module.shell_line(words(Stdio(r"C:\Program Files\agenttx.exe", ("mcp",))), "win32")
    assert line == r'codex mcp add agenttx -- "C:\Program Files\agenttx.exe" mcp'
    assert apps_module.APPS["cursor"].entry(Http("http://h/mcp")) == {"url": "http://h/mcp"}


def test_the_installed_command_writes_an_entry_that_launches_it(tmp_path: Path) -> None:
    """Through the real executable, in a real HOME: the entry names that executable, and
    what it names runs."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    env.pop("CLAUDE_CONFIG_DIR", None)
    done = subprocess.run(
        [EXECUTABLE, "connect", "claude-code", "--write"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    entry = json.loads((home / ".claude.json").read_text())["mcpServers"]["agenttx"]
    assert entry["type"] == "stdio"
    assert entry["command"] == EXECUTABLE
    version = subprocess.run(
        [entry["command"], "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert version.returncode == 0
    assert "version" in version.stdout


def test_a_config_file_over_the_size_limit_is_refused_at_the_limit_read(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_file, "MAX_CONFIG_BYTES", 64)
    path = config_path("cursor", home)
    path.parent.mkdir(parents=True)
    at_limit = '{"mcpServers": {}, "pad": "' + "x" * 35 + '"}'
    assert len(at_limit.encode()) == 64
    path.write_text(at_limit)
    assert invoke("cursor", "--write").exit_code == 0
    over = '{"mcpServers": {}, "pad": "' + "x" * 36 + '"}'
    path.write_text(over)
    result = invoke("cursor", "--write")
    assert result.exit_code == 1
    assert "65 bytes, over the 64 bytes" in result.output
    assert path.read_text() == over


def test_a_file_that_is_not_utf8_is_refused(home: Path) -> None:
    path = config_path("windsurf", home)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"mcpServers": {"caf\xe9": {}}}')
    result = invoke("windsurf", "--write")
    assert result.exit_code == 1
    assert "not UTF-8 text" in result.output
    assert path.read_bytes() == b'{"mcpServers": {"caf\xe9": {}}}'


def test_an_edit_that_would_move_other_content_is_refused(home: Path) -> None:
    """Top-level dotted keys before other keys: tomlkit would put our table between them and
    so move ``model`` into it. The check of the result against what was meant refuses it."""
    path = config_path("codex", home)
    path.parent.mkdir(parents=True)
    text = 'mcp_servers.docs.command = "x"\nmodel = "o3"\n'
    path.write_text(text)
    result = invoke("codex", "--write")
    assert result.exit_code == 1
    assert "could not add mcp_servers.agenttx without changing other content" in result.output
    assert path.read_text() == text
    assert backups(path) == []


def test_a_toml_file_without_a_final_newline_gets_our_table_on_its_own_line(home: Path) -> None:
    path = config_path("codex", home)
    path.parent.mkdir(parents=True)
    path.write_text('model = "o3"')
    assert invoke("codex", "--write").exit_code == 0
    text = path.read_text()
    assert text.startswith('model = "o3"\n\n[mcp_servers.agenttx]\n')
    assert text.endswith("]\n")
