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
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def installing(target: Path) -> Iterator[None]:
    """Hold the lock of ``target`` (``<target>.lock``, made with its parent directory)."""
    lock = target.with_name(target.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield
