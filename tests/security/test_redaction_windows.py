"""The hint redactor scans a long text window by window (``agenttx/redaction.py``): each
regex search is one C call that holds the interpreter, so a 1 MiB text scanned whole stopped
every other thread for up to ~90 ms. Windowed, it must mask exactly what a whole-text scan
masks — including matches that cross a window's end and ones longer than a window."""

from __future__ import annotations

import random

import pytest

from agenttx import redaction
from agenttx.redaction import MASK, REACH, WINDOW, redact


def whole_text_redact(text: str) -> str:
    """The redactor as it was before windows: every pattern's ``finditer`` over the whole
    text (the reference the windowed scan must equal)."""
    low = redaction._lower_same_length(text)
    done = None
    for needle, red in redaction._REDACTION_NEEDLES:
        if needle not in low or red is done:
            continue
        done = red
        pieces: list[str] = []
        last = 0
        for match in red.pattern.finditer(low):
            start, end = match.span("s")
            pieces += [text[last:start], MASK]
            last = end
        if pieces:
            pieces.append(text[last:])
            text = "".join(pieces)
            low = redaction._lower_same_length(text)
    return text


FRAGMENTS = [
    "token=abc123 ",
    "Bearer xyz.abc== ",
    "https://user:pw@host/ ",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig ",
    "AKIAABCDEFGHIJKLMNOP ",
    "sk-" + "a" * 30 + " ",
    'password: "hunter2" ',
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n",
    "authorization: Basic dXNlcjpwYXNz\n",
    "ghp_" + "b" * 36,
    " lorem ipsum ",
    "x" * 500,
    "\n",
    "a://",
]


@pytest.mark.parametrize("seed", range(40))
def test_windows_mask_what_the_whole_text_scan_masks(seed: int) -> None:
    rnd = random.Random(seed)
    parts = [rnd.choice(FRAGMENTS) for _ in range(rnd.randint(200, 3000))]
    # Matches longer than a window, placed anywhere: unbounded JWTs, bearer tails, PEM blocks.
    for long in (
        "eyj" + "q" * rnd.randint(WINDOW // 2, 3 * WINDOW),
        "bearer " + "a" * 4000 + "=" * rnd.randint(1, 3 * WINDOW),
        "-----BEGIN PRIVATE KEY-----" + "z" * rnd.randint(1, 3 * WINDOW),
        "Authorization: Bearer " + "t" * 4096,
    ):
        if rnd.random() < 0.5:
            parts.insert(rnd.randrange(len(parts) + 1), long)
    text = "".join(parts)
    assert len(text) > WINDOW + REACH or seed % 7 == 0  # most texts take the windowed path
    assert redact(text) == whole_text_redact(text)


def test_a_secret_across_every_window_boundary_is_masked_whole() -> None:
    filler = "x " * ((WINDOW + REACH) // 2)
    for shift in range(-40, 41, 8):
        at = WINDOW + shift
        text = (filler[:at] + " token=" + "s" * 300 + " " + filler)[: 3 * WINDOW]
        got = redact(text)
        assert "s" * 10 not in got, shift
        assert got == whole_text_redact(text)
