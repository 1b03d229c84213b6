"""Reading a file the user names (a config file, a key file) with its size bounded."""

from __future__ import annotations

from pathlib import Path


def read_capped(path: Path, limit: int) -> bytes | None:
    """The bytes of the file at ``path``, or None if it holds more than ``limit``: never more
    than ``limit + 1`` is read, so a FIFO, a device or a file that grew since its size was
    checked cannot make a start read without end. ``OSError`` passes through."""
    with path.open("rb") as f:
        data = f.read(limit + 1)
    return None if len(data) > limit else data
