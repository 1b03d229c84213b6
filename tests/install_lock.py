"""One installer at a time: test set-up that installs into a shared place (npm prefixes and
the git server's virtualenv under ``~/.cache/agenttx-tests``, apt's chromium) runs under an
exclusive lock on a file beside it.

The suite runs its files in parallel processes (``make pytest``), and two ``npm install``s into
one prefix, or two ``apt-get``s, break each other. Whoever gets the lock second finds the
install done and returns at once: callers check for what they need again inside the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

import pytest


def unavailable(what: str, reason: str) -> NoReturn:
    """What a test needs (``what``, e.g. "headless Chromium is") cannot be installed here:
    the test fails under CI, where it must run, and elsewhere skips with ``reason`` shown."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} needed under CI: {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def installing(target: Path) -> Iterator[None]:
    """Hold the lock of ``target`` (``<target>.lock``, made with its parent directory)."""
    lock = target.with_name(target.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


def npm_install(prefix: Path, installed: str, packages: Sequence[str], *flags: str) -> str:
    """Install ``packages`` into ``prefix`` with npm unless ``installed``, a path under its
    ``node_modules`` (a binary: ``.bin/<name>``), is there already (one process at a time). ""
    once it is there, else why it is not."""
    path = prefix / "node_modules" / installed
    if path.exists():
        return ""
    with installing(prefix):
        if path.exists():  # another process installed it while this one waited
            return ""
        npm = shutil.which("npm")
        if npm is None or shutil.which("node") is None:
            return "node and npm are not installed"
        prefix.mkdir(parents=True, exist_ok=True)
        command = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", *flags]
        done = subprocess.run(
            [*command, *packages], capture_output=True, text=True, timeout=600, check=False
        )
    if done.returncode != 0 or not path.exists():
        return f"npm install {' '.join(packages)} failed: {done.stderr[-500:]}"
    return ""
