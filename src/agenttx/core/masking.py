"""Field redaction: what AgentTx keeps or returns after a tool ran has secret-looking fields
masked; only the tool itself sees the real values.

A field is secret when its name's last word is one of ``SECRET_WORDS`` (``password``,
``token``, ``secret``, ``authorization``, ``cookie``, ``credentials`` …) or its last two are
one of ``SECRET_PAIRS`` (``api_key``, ``private_key``, ``access_key``, ``session_id`` …); names
are split on ``_``, ``-``, ``.``, spaces and camelCase, so ``X-Api-Key``, ``clientSecret`` and
``db.password`` are secret while ``max_tokens``, ``token_count`` and ``password_hint`` are not.
Configured patterns (``--redact-field REGEX``) are matched, case-insensitively, against the
whole name. A secret field's value, whatever its type, becomes ``"***"`` (null and "" stay:
there is nothing to hide). Every other string goes through the hint redactor
(``hints.redaction``), which masks bearer tokens, ``password=…`` text, passwords in URLs, JWTs
and well-known API key shapes inside free text.

Pure functions of their input; the JSON walk is linear in its size, and callers run it off
the event loop for large values (``offload.by_size``). A text with none of the needles is
returned unparsed. The needle test (``may_hold``) reads a long text in slices of
``SCAN_SLICE`` characters: each substring test and regex scan is one C call that holds the
interpreter, so a 4 MB text scanned whole would stop the event loop for its whole length even
from a worker thread; a slice's scans take well under a millisecond.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import Any

from agenttx.core.hints.redaction import MASK, redact
from agenttx.errors import InvalidArgument
from agenttx.jsontext import compact

SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "token",
        "authorization",
        "cookie",
        "cookies",
        "credential",
        "credentials",
        "apikey",
        "jwt",
        "otp",
    }
)
SECRET_PAIRS = frozenset(
    {
        ("api", "key"),
        ("private", "key"),
        ("access", "key"),
        ("secret", "key"),
        ("signing", "key"),
        ("session", "id"),
        ("session", "key"),
        ("auth", "key"),
        ("set", "cookie"),
    }
)
# Lowercase substrings one of which a JSON text must hold for a walk to find anything: the
# secret names' and the hint redactor's (bearer, URLs with a password, JWTs, key prefixes).
_NEEDLES = (
    "pass",
    "pwd",
    "secret",
    "token",
    "author",
    "cookie",
    "credential",
    "apikey",
    "jwt",
    "otp",
    "session",
    "bearer",
    "://",
    "eyj",
    "akia",
    "asia",
    "sk-",
    "sk_",
    "gh",
    "xox",
    "aiza",
    "private",
)
# A "key" alone is no secret (``kv.put``'s ``key`` is in most steps): only the pairs that are,
# ``(api|private|access|secret|signing|session|auth)[-_. ]?key``. Matched on the reversed text:
# the pattern then starts with the literal "yek", which the regex engine skips to directly,
# where the forward form tried seven words at every position (270 ms a MiB of "aaa…" against
# at most ~60 ms of "keykey…" reversed).
_KEY_PAIR_REVERSED = re.compile(r"yek[-_. ]?(?:ipa|etavirp|ssecca|terces|gningis|noisses|htua)")
# ``may_hold`` scans a long text slice by slice (module doc); consecutive slices overlap by more
# than the longest needle or key pair ("signing key", 11 characters), so none is cut unseen.
SCAN_SLICE = 64 << 10
_SCAN_OVERLAP = 16
MIN_SCRUBBED_CHARS = 4  # a shorter secret value is not searched for in free text
MAX_PATTERNS = 64
MAX_PATTERN_BYTES = 256
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORDS.findall(name)]


def _slice_may_hold(low: str) -> bool:
    """Whether a lowercased slice holds a needle or a secret key pair."""
    return any(n in low for n in _NEEDLES) or _KEY_PAIR_REVERSED.search(low[::-1]) is not None


class Redactor:
    """Masks secret fields (module doc); ``patterns`` are the configured field-name regexes."""

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        if len(patterns) > MAX_PATTERNS:
            raise InvalidArgument(f"at most {MAX_PATTERNS} --redact-field patterns")
        compiled: list[re.Pattern[str]] = []
        for p in patterns:
            if len(p.encode()) > MAX_PATTERN_BYTES:
                raise InvalidArgument(
                    f"--redact-field pattern over {MAX_PATTERN_BYTES} bytes: {p[:40]!r}…"
                )
            try:
                compiled.append(re.compile(p, re.IGNORECASE))
            except re.error as exc:
                raise InvalidArgument(f"--redact-field {p!r} is not a regex: {exc}") from exc
        self.patterns = tuple(compiled)
        # Field names repeat across steps: each is classified once (bounded cache).
        self.is_secret = functools.lru_cache(maxsize=4096)(self._is_secret)

    def _is_secret(self, name: str) -> bool:
        words = _words(name)
        if words and (words[-1] in SECRET_WORDS or tuple(words[-2:]) in SECRET_PAIRS):
            return True
        return any(p.fullmatch(name) for p in self.patterns)

    def may_hold(self, text: str) -> bool:
        """False iff ``text`` surely holds nothing to mask (no needle, no configured pattern)."""
        if self.patterns:
            return True
        if len(text) <= SCAN_SLICE:
            return _slice_may_hold(text.lower())
        return any(
            _slice_may_hold(text[max(start - _SCAN_OVERLAP, 0) : start + SCAN_SLICE].lower())
            for start in range(0, len(text), SCAN_SLICE)
        )

    def value(self, value: Any) -> Any:
        """``value`` with secret fields masked: the same object when nothing was masked."""
        if isinstance(value, dict):
            out: dict[str, Any] | None = None
            for k, v in value.items():
                masked = self._field(k, v) if isinstance(k, str) else self.value(v)
                if masked is not v and out is None:
                    out = dict(value)
                if out is not None:
                    out[k] = masked
            return value if out is None else out
        if isinstance(value, list):
            items = [self.value(v) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        if isinstance(value, str):
            masked_text = redact(value)
            return value if masked_text == value else masked_text
        return value

    def _field(self, name: str, value: Any) -> Any:
        if value is None or value == "" or value == MASK:
            return value
        if self.is_secret(name):
            return MASK
        return self.value(value)

    def json_text(self, text: str, parsed: Any = None) -> str:
        """A JSON text with its secret fields masked (``parsed``: its value, if at hand); text
        that is not JSON gets the free-text redactor."""
        if not text or not self.may_hold(text):
            return text
        try:
            if parsed is None:
                parsed = json.loads(text)
            masked = self.value(parsed)
        except (ValueError, RecursionError):
            # Not JSON, or nested past what a walk can take (the JSON policy refuses such
            # arguments; their failed attempt still stores them): the free-text redactor.
            return redact(text)
        return text if masked is parsed else compact(masked)

    def output(self, output: Any, output_json: str) -> tuple[Any, str]:
        """A tool's output and its JSON text, masked (both unchanged if nothing was)."""
        if not self.may_hold(output_json):
            return output, output_json
        try:
            masked = self.value(output)
        except RecursionError:
            # Nested past any JSON the policy accepts: the step is refused right after this
            # (``json_depth``) and the output is not kept.
            return output, output_json
        return (output, output_json) if masked is output else (masked, compact(masked))

    def secret_values(self, value: Any, *, under_secret: bool = False) -> list[str]:
        """The texts of the values held by secret fields in ``value`` (at least
        ``MIN_SCRUBBED_CHARS`` long), to scrub from free text quoting them (a validation
        error's "got string 'hunter2'")."""
        found: list[str] = []
        if isinstance(value, dict):
            for k, v in value.items():
                secret = under_secret or (isinstance(k, str) and self.is_secret(k))
                found.extend(self.secret_values(v, under_secret=secret))
        elif isinstance(value, list):
            for v in value:
                found.extend(self.secret_values(v, under_secret=under_secret))
        elif under_secret and isinstance(value, str | int | float) and not isinstance(value, bool):
            text = str(value)
            if len(text) >= MIN_SCRUBBED_CHARS:
                found.append(text)
        return found

    @staticmethod
    def scrub(text: str, secrets: Sequence[str]) -> str:
        """``text`` with every occurrence of each of ``secrets`` masked, longest first."""
        for secret in sorted(set(secrets), key=len, reverse=True):
            text = text.replace(secret, MASK)
        return text

    @staticmethod
    def text(text: str) -> str:
        """Free text (a raw context, an error) through the hint redactor."""
        return redact(text) if text else text


__all__ = ["MASK", "SECRET_PAIRS", "SECRET_WORDS", "Redactor"]
