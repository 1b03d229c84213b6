"""Reading a file the user names (a config file, a key file) with its size bounded."""

from __future__ import annotations

import os
from pathlib import Path


def read_capped(path: Path, limit: int) -> bytes | None:
    """The bytes of the file at ``path``, or None if it holds more than ``limit``: never more
    than ``limit + 1`` is read, so a FIFO, a device or a file that grew since its size was
    checked cannot make a start read without end. ``OSError`` passes through."""
    return read_capped_with_mode(path, limit)[0]


def read_capped_with_mode(path: Path, limit: int) -> tuple[bytes | None, int]:
    """``read_capped`` and the file's ``st_mode``, taken from the open file (not from the path
    again, which may name another file by then): for a secret that others must not read."""
    with path.open("rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        data = f.read(limit + 1)
    return (None if len(data) > limit else data), mode
