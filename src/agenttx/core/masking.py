"""Field redaction: what AgentTx keeps or returns after a tool ran has secret-looking fields
masked; only the tool itself sees the real values.

A field's name is split into words on ``_``, ``-``, ``.``, spaces and camelCase, and a word
ending in ``s`` is read as its singular too (``passwords``, ``tokens``, ``api_keys``). The
field is secret when:

- its last word is one of ``SECRET_WORDS`` (``password``, ``token``, ``secret``, ``bearer``,
  ``authorization``, ``cookie``, ``credentials`` …) or its last two are one of
  ``SECRET_PAIRS`` (``api_key``, ``private_key``, ``access_key``, ``session_id`` …) — except a
  ``token`` named with a count word (``max_tokens``, ``prompt_tokens``, ``token_count``: a
  number of a model's tokens, ``TOKEN_COUNT_WORDS``);
- or an earlier word is a secret word and no word after it says the field is *about* the
  secret rather than the secret (``ABOUT_WORDS``: ``password_hint``, ``token_type``,
  ``secret_name``, ``token_url``): ``secrets.db``, ``password_file``, ``authorization_code``.

Whole words only: ``tokenizer``, ``passwordless`` and ``keyboard`` are one word each and no
secret. Configured patterns (``--redact-field REGEX``) are matched, case-insensitively,
against the whole name. A secret field's value, whatever its type, becomes ``"***"`` (null
and "" stay: there is nothing to hide). In a list of name/value pairs (``[{"name":
"Authorization", "value": …}]``, ``{"Key": …, "Value": …}``: HTTP headers, environment
variables, tags) the ``value`` of a pair whose name is secret is masked the same way. Every
other string goes through the hint redactor (``agenttx.redaction``), which masks bearer
tokens, ``password=…`` text, passwords in URLs, JWTs and well-known API key shapes inside
free text.

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

from agenttx.errors import InvalidArgument
from agenttx.jsontext import compact
from agenttx.redaction import MASK, redact

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
        "bearer",
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
# A ``token`` named with one of these counts a model's tokens (``max_tokens``,
# ``prompt_tokens``, ``token_count``, ``tokens_used``): a number, not a credential.
TOKEN_COUNT_WORDS = frozenset(
    {
        "max",
        "min",
        "num",
        "number",
        "count",
        "total",
        "limit",
        "prompt",
        "completion",
        "input",
        "output",
        "cached",
        "cache",
        "reasoning",
        "used",
        "remaining",
        "per",
    }
)
# A word after a secret word that makes the name one *about* the secret, not the secret:
# ``password_hint``, ``token_type``, ``secret_name``, ``password_reset_url``.
ABOUT_WORDS = frozenset(
    {
        "hint",
        "count",
        "length",
        "len",
        "size",
        "type",
        "kind",
        "name",
        "names",
        "url",
        "uri",
        "endpoint",
        "expiry",
        "expires",
        "expiration",
        "ttl",
        "policy",
        "usage",
        "format",
        "version",
        "required",
        "enabled",
        "rotation",
        "strength",
        "label",
        "domain",
    }
)
# The keys that name a name/value pair's name and value, as they are spelled (a dict of a
# list is tested with at most these lookups: no scan of its keys).
_PAIR_NAMES = ("name", "Name", "key", "Key", "header", "Header", "field", "Field")
_PAIR_VALUES = ("value", "Value")
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
# A text up to this long (a typical step's arguments and output: a few dozen characters) is
# tested by one regex of every needle and key pair: one C call instead of 22 substring tests
# and a reversed copy (about 3× faster, measured). A longer one keeps the substring tests:
# each is a fast search of the whole text, where the regex tries its alternatives at every
# position (2-3× slower than them over 64 KiB).
SHORT_SCAN_CHARS = 512
_SHORT_SCAN = re.compile(
    "|".join(
        [*map(re.escape, _NEEDLES), r"(?:api|private|access|secret|signing|session|auth)[-_. ]?key"]
    )
)
# ``may_hold`` scans a long text slice by slice (module doc); consecutive slices overlap by more
# than the longest needle or key pair ("signing key", 11 characters), so none is cut unseen.
SCAN_SLICE = 64 << 10
_SCAN_OVERLAP = 16
MIN_SCRUBBED_CHARS = 4  # a shorter secret value is not searched for in free text
MAX_NAME_CHARS = 256  # a longer key (a dict keyed by free text) is classified by its ends
MAX_PATTERNS = 64
MAX_PATTERN_BYTES = 256
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


# The words a plural is read back to: ``passwords`` → ``password``, ``api_keys`` → key.
_SINGULARS = SECRET_WORDS | {w for pair in SECRET_PAIRS for w in pair}


def _words(name: str) -> list[str]:
    """``name``'s words, lowercase, each plural of a secret word read as its singular."""
    words = [w.lower() for w in _WORDS.findall(name)]
    return [w[:-1] if w.endswith("s") and w[:-1] in _SINGULARS else w for w in words]


def secret_name(words: Sequence[str]) -> bool:
    """Whether a name of these words (``_words``) is a secret's, by the module doc's rule."""
    if not words:
        return False
    last = words[-1]
    if last in SECRET_WORDS or tuple(words[-2:]) in SECRET_PAIRS:
        counted = (last == "token" or words[-2:-1] == ["token"]) and any(
            w in TOKEN_COUNT_WORDS for w in words
        )
        return not counted
    for i, word in enumerate(words[:-1]):
        if word in SECRET_WORDS:
            later = words[i + 1 :]
            about = any(w in ABOUT_WORDS for w in later)
            counted = word == "token" and any(w in TOKEN_COUNT_WORDS for w in words)
            return not (about or counted)
    return False


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
        if len(name) > MAX_NAME_CHARS:  # no field name is this long: test its start and end
            name = name[: MAX_NAME_CHARS // 2] + " " + name[-MAX_NAME_CHARS // 2 :]
        return secret_name(_words(name)) or any(p.fullmatch(name) for p in self.patterns)

    def may_hold(self, text: str) -> bool:
        """False iff ``text`` surely holds nothing to mask (no needle, no configured pattern)."""
        if self.patterns:
            return True
        if len(text) <= SHORT_SCAN_CHARS:
            return _SHORT_SCAN.search(text.lower()) is not None
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
            items = [self._item(v) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        if isinstance(value, str):
            masked_text = redact(value)
            return value if masked_text == value else masked_text
        return value

    def _item(self, item: Any) -> Any:
        """A list's item: a name/value pair whose name is secret has its value masked."""
        if isinstance(item, dict):
            value_key = self._secret_pair_value(item)
            if value_key is not None:
                masked = self.value(item)
                out = dict(masked) if masked is item else masked
                out[value_key] = MASK
                return out
        return self.value(item)

    def _secret_pair_value(self, item: dict[Any, Any]) -> str | None:
        """The key of ``item``'s value if it is a name/value pair whose name is secret and
        whose value is not empty; else None."""
        for value_key in _PAIR_VALUES:
            held = item.get(value_key)
            if held is None or held == "" or held == MASK:
                continue
            for name_key in _PAIR_NAMES:
                name = item.get(name_key)
                if isinstance(name, str) and self.is_secret(name):
                    return value_key
        return None

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
                # A list's name/value pair with a secret name: its value, as ``_item`` masks.
                pair_value = self._secret_pair_value(v) if isinstance(v, dict) else None
                if pair_value is not None:
                    found.extend(self.secret_values(v[pair_value], under_secret=True))
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


__all__ = [
    "ABOUT_WORDS",
    "MASK",
    "SECRET_PAIRS",
    "SECRET_WORDS",
    "TOKEN_COUNT_WORDS",
    "Redactor",
    "secret_name",
]
