"""Redaction: secrets in free text replaced by ``***`` — in a hint, a log line, a stored string.

A bottom-layer module (standard library only), so every layer that masks text uses this one
rule: the hint cleaner (``core.hints``), field masking (``core.masking``) and the log
formatter (``logs``).

Invariants: ``redact`` is pure and linear in the text's length; its patterns run on a
lowercased copy of the same length, so the spans they find index the original text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["MASK", "SECRET_NAME", "redact"]

MASK = "***"


class _Redaction(NamedTuple):
    needles: tuple[str, ...]  # lowercase; the pattern runs only if one occurs
    pattern: re.Pattern[str]  # lowercase-only; group "s" is the span replaced by the mask


# The patterns run on a lowercased copy of the same length, so spans carry over to the
# original: a case-insensitive regex costs ten times more in CPython than a lowercase one.
_REDACTIONS: tuple[_Redaction, ...] = tuple(
    _Redaction(needles, re.compile(pattern))
    for needles, pattern in (
        (
            ("private key",),
            r"-----begin [a-z ]{0,40}private key-----(?P<s>[\s\S]*?)"
            r"(?=-----end [a-z ]{0,40}private key-----|\Z)",
        ),
        (
            ("authorization",),
            r"authorization[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']?"
            r"(?:(?:bearer|basic|token|digest|bot|negotiate|apikey)[ \t]+)?"
            r"(?P<s>[^\s\"',;]{1,4096})",
        ),
        (("bearer",), r"\bbearer[ \t]+(?P<s>[a-z0-9\-._~+/]{1,4096}=*)"),
        (("://",), r"\b[a-z][a-z0-9+.\-]{0,30}://[^\s/:@]{0,200}:(?P<s>[^\s/@]{1,200})@"),
        (
            (
                "pass",
                "pwd",
                "secret",
                "token",
                "_key",
                "-key",
                "apikey",
                "credential",
                "session",
                "bearer",
            ),
            # "tokens" only as a word of its own or a credential's (``max_tokens=`` counts);
            # a dotted name (``secrets.db``) only as a quoted key, not a file in a sentence.
            r"(?:passw(?:or)?d|passphrase|pwd|secret|token(?!s)|\btokens"
            r"|(?:access|refresh|auth|api|id|session|bearer|oauth)[_-]?tokens"
            r"|api[_-]?keys?|apikey|access[_-]?key|private[_-]?key|auth[_-]?key|credentials?"
            r"|session[_-]?(?:id|key|token)|(?<![a-z])bearer(?=[\w.-]{0,40}?[\"']?[ \t]{0,3}[:=]))"
            r"[\w-]{0,40}?(?:\.[\w.-]{0,20}?(?=[\"']))?[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']?"
            r"(?P<s>(?<=\")[^\"\n]{1,500}(?=\")|(?<=')[^'\n]{1,500}(?=')|[^\s\"',;&)}\]]{1,500})",
        ),
        (
            # A name/value pair whose name is a secret's (``{"name": "X-Api-Key", "value": …}``,
            # a header list, ``env``, tags): its value.
            ("value",),
            r"(?:name|key|header|field)[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']"
            r"[\w.-]{0,40}?(?:authorization|cookie|passw|pwd|secret|token|bearer|api[_-]?key"
            r"|apikey|credential|private[_-]?key|session)[\w.-]{0,40}[\"'][ \t]{0,3},[ \t]{0,3}"
            r"[\"']?value[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']?"
            r"(?P<s>(?<=\")[^\"\n]{1,500}(?=\")|(?<=')[^'\n]{1,500}(?=')|[^\s\"',;&)}\]]{1,500})",
        ),
        (("eyj",), r"\b(?P<s>eyj[a-z0-9_\-]{8,}(?:\.[a-z0-9_\-]*){0,2})"),
        (("akia", "asia", "abia", "acca"), r"\b(?P<s>(?:akia|asia|abia|acca)[a-z0-9]{16})\b"),
        (
            ("sk-", "sk_", "rk_", "rk-", "gh", "xox", "aiza"),
            r"\b(?P<s>(?:sk|rk)[-_](?:live_|test_|proj-|ant-)?[a-z0-9_\-]{16,}"
            r"|gh[pousr]_[a-z0-9]{30,}|github_pat_[a-z0-9_]{20,}|xox[abposr]-[a-z0-9\-]{10,}"
            r"|aiza[a-z0-9_\-]{30,})",
        ),
    )
)

# Every redaction's needles in order, each with its redaction: one flat loop (see
# HintCleaner._needles) where a loop over redactions with a loop over needles inside spent a
# fifth of a typical hint's redaction time in the interpreter.
_REDACTION_NEEDLES: tuple[tuple[str, _Redaction], ...] = tuple(
    (needle, redaction) for redaction in _REDACTIONS for needle in redaction.needles
)

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
SECRET_NAME = re.compile(
    r"passw|pwd|secret|token|api[_-]?key|apikey|credential|private[_-]?key|bearer"
)


def redact(text: str) -> str:
    """``text`` with secrets replaced by ``***``: Authorization headers and bearer tokens,
    ``password=``/``"password": …``/``api_key``/``token``/``secret`` assignments, passwords in
    URLs (``scheme://user:***@host``), JWTs, AWS access key ids, ``sk-…``/GitHub/Slack/Google
    API keys and PEM private keys. Pure; linear in ``len(text)``."""
    low = _lower_same_length(text)
    done = None  # a redaction runs at its first needle that occurs, and only then
    for needle, redaction in _REDACTION_NEEDLES:
        if needle not in low or redaction is done:
            continue
        done = redaction
        pieces: list[str] = []
        last = 0
        for start, end in _spans(redaction.pattern, low):
            pieces.append(text[last:start])
            pieces.append(MASK)
            last = end
        if pieces:
            pieces.append(text[last:])
            text = "".join(pieces)
            low = _lower_same_length(text)
    return text


# A regex scan is one C call that holds the interpreter, from a worker thread too: a long text
# is scanned window by window, each search starting its matches in ``WINDOW`` characters and
# seeing ``REACH`` more, so no call runs for more than a few milliseconds (the slowest pattern,
# URLs with a password, is ~120 ms a MiB scanned whole). ``REACH`` exceeds every bounded match
# (the longest: an Authorization value, 4,096 characters, and its prefix), so a match that ends
# before the window's end is the one the whole text gives; one that reaches the end may go on
# (the unbounded tails: JWTs, key shapes, a PEM block) and is taken again from the whole text.
WINDOW = 16 << 10
REACH = 8 << 10


def _spans(pattern: re.Pattern[str], low: str) -> Iterator[tuple[int, int]]:
    """The ``s`` spans of ``pattern``'s matches in ``low``, left to right, as ``finditer``
    gives them."""
    n = len(low)
    if n <= WINDOW + REACH:
        for found in pattern.finditer(low):
            yield found.span("s")
        return
    pos = 0
    while pos < n:
        stop = min(pos + WINDOW, n)
        seen = min(stop + REACH, n)
        match = pattern.search(low, pos, seen)
        if match is None or match.start() >= stop:
            pos = stop
            continue
        if match.end() >= seen and seen < n:
            # It touched the end of what the search saw: decide it on the whole text.
            whole = pattern.match(low, match.start())
            if whole is None:  # it matched only because the text seemed to end there
                pos = match.start() + 1
                continue
            match = whole
        yield match.span("s")
        pos = max(match.end(), match.start() + 1)


def _lower_same_length(text: str) -> str:
    # str.lower is fast but may change the length ("İ" becomes two characters); the spans
    # found in the lowered copy must index the original, so fall back to ASCII-only lowering.
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)
