"""The real downstream MCP servers the gateway tests use, installed by the test set-up.

The reference servers come from npm at one pinned version into a cache directory outside the
tree (once; later runs reuse it); ``mcp-server-git`` comes from PyPI, pinned with its
dependencies (``gateway_git_requirements.txt``), into a virtualenv of its own in the same
cache (it must not share our venv: it brings its own SDK pins). Without npm, or with a
registry unreachable, the tests are skipped with that reason, except under CI, where they
fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, NoReturn

from agenttx.server import ServeConfig, open_engine
from install_lock import installing, npm_install
from install_lock import unavailable as unavailable_here

NPM_SERVERS = (
    "@modelcontextprotocol/server-filesystem",
    "@modelcontextprotocol/server-memory",
    "@modelcontextprotocol/server-everything",
)
NPM_VERSION = "2026.8.31"  # the three reference servers are released together
GIT_SERVER_VERSION = "2026.10.19"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agenttx-tests"
NPM_PREFIX = CACHE / f"mcp-servers-{NPM_VERSION}"
GIT_VENV = CACHE / f"mcp-server-git-{GIT_SERVER_VERSION}"
GIT_REQUIREMENTS = Path(__file__).parent / "gateway_git_requirements.txt"


def unavailable(reason: str) -> NoReturn:
    unavailable_here("the downstream MCP servers are", reason)


def npm_server(binary: str) -> str:
    """The path of a reference server's executable (``mcp-server-filesystem`` …)."""
    packages = [f"{name}@{NPM_VERSION}" for name in NPM_SERVERS]
    problem = npm_install(NPM_PREFIX, f".bin/{binary}", packages)
    if problem:
        unavailable(f"the MCP reference servers: {problem}")
    return str(NPM_PREFIX / "node_modules" / ".bin" / binary)


def git_server() -> str:
    """The path of ``mcp-server-git``, in its own pinned virtualenv."""
    path = GIT_VENV / "bin" / "mcp-server-git"
    if path.exists():
        return str(path)
    with installing(GIT_VENV):
        if not path.exists():
            _pip_install(path)
    return str(path)


def _pip_install(path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "venv", str(GIT_VENV)], capture_output=True, text=True, check=False
    )
    if done.returncode == 0:
        done = subprocess.run(
            [str(GIT_VENV / "bin" / "pip"), "install", "-q", "-r", str(GIT_REQUIREMENTS)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    if done.returncode != 0 or not path.exists():
        shutil.rmtree(GIT_VENV, ignore_errors=True)
        unavailable(
            f"pip install mcp-server-git=={GIT_SERVER_VERSION} failed: {done.stderr[-500:]}"
        )


def write_gateway(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


async def gateway_engine(store_url: str, data_dir: Path, gateway_file: Path, **kwargs: Any) -> Any:
    """An engine opened the way ``agenttx serve --gateway FILE`` opens it."""
    config = ServeConfig(
        store=store_url, data_dir=data_dir, gateway=gateway_file, metrics_addr=None, **kwargs
    )
    return await open_engine(config)
