"""Headless Chromium for the dashboard tests: Debian's ``chromium`` package (installed here by
the test set-up if it is missing, at the pinned version), driven by Playwright through its
``executable_path`` — never a browser Playwright downloads. Screenshots go to
``test-artifacts/`` (``AGENTTX_TEST_ARTIFACTS`` elsewhere) and are checked non-blank."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import NoReturn

from install_lock import installing
from install_lock import unavailable as unavailable_here

CHROMIUM = Path("/usr/bin/chromium")
# Debian 12's chromium when these tests were written; apt installs exactly this one.
CHROMIUM_VERSION = "156.0.8078.114-1~deb12u1"
# This machine's closed network refuses Chromium's background connections; without these
# flags it keeps retrying them (docs/testing.md).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(
    os.environ.get(
        "AGENTTX_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"
    )
)


# apt takes its own lock and fails (rather than waits) when another apt holds it: ours waits.
INSTALL_LOCK = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agenttx-tests" / "chromium"
)


def _unavailable(reason: str) -> NoReturn:
    unavailable_here("headless Chromium is", reason)


def chromium() -> Path:
    """The browser binary, installed with apt first if it is missing."""
    if CHROMIUM.exists():
        return CHROMIUM
    with installing(INSTALL_LOCK):
        if not CHROMIUM.exists():
            _apt_install()
    return CHROMIUM


def _apt_install() -> None:
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        _unavailable("chromium is not installed and apt-get cannot install it here")
    for command in (
        [apt, "update", "-q"],
        [apt, "install", "-y", "-q", "--no-install-recommends", f"chromium={CHROMIUM_VERSION}"],
    ):
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        if done.returncode != 0:
            _unavailable(f"{' '.join(command)} failed: {done.stderr[-800:]}")
    if not CHROMIUM.exists():
        _unavailable("apt-get installed chromium but /usr/bin/chromium is missing")


def save_screenshot(png: bytes, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    path.write_bytes(png)
    return path


def distinct_colours(png: bytes, most: int = 64) -> int:
    """How many distinct pixel values the PNG has (counting stops at ``most``): a blank page
    has one or two. Reads 8-bit RGB(A) PNGs as Chromium writes them."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        data = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", data[:10])
            assert depth == 8, depth
            channels = {2: 3, 6: 4}[colour]
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels + 1
    seen: set[bytes] = set()
    # Filtered rows: the filter byte aside, a row's bytes differ iff its pixels do, which is
    # enough to tell a blank page (every row alike, every byte alike) from a drawn one.
    for y in range(0, height, max(1, height // 200)):
        row = raw[y * stride + 1 : (y + 1) * stride]
        for x in range(0, len(row) - channels, channels * max(1, width // 200)):
            seen.add(row[x : x + channels])
            if len(seen) >= most:
                return len(seen)
    return len(seen)
