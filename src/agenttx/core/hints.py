"""Clean Hints: one short line an agent can act on, made from a tool's raw error.

A failed step's raw error (exception text and traceback, from any language, any size) becomes a
``Hint``: ``text`` (one line, at most ``max_len`` characters, starting ``"Hint: "``), the
``category`` the rollback controller decides on, the ``rule`` that matched and the ``key`` the
error names (the engine traces the root cause from it).

How: the input is capped (``MAX_INPUT_CHARS``: first quarter and last three quarters kept), stack
frame lines are removed, then an ordered rule table is tried, first match wins; a rule is data
(``hint_rules.toml`` beside this module, plus the user's TOML files, which go first). Nothing
matched: the message of the last ``Caused by:``, else of the last exception-like line, else the
last line.

Invariants:
- ``HintCleaner.clean`` never raises, and its result always satisfies the ``text`` contract
  above, with secrets redacted (``redact``) and no stack frame in it.
- Pure and deterministic; a cleaner is immutable once built, so one instance serves all threads.
- Everything is compiled once, when the cleaner is built; a bad rule file fails there, as
  ``InvalidArgument`` naming the file, the rule and the problem.
"""

from __future__ import annotations

import enum
import functools
import itertools
import os
import re
import threading
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, NamedTuple

from agenttx.errors import InvalidArgument

__all__ = [
    "ARGUMENT_CATEGORIES",
    "DEFAULT_MAX_LEN",
    "MAX_INPUT_CHARS",
    "TRANSIENT_CATEGORIES",
    "Category",
    "Hint",
    "HintCleaner",
    "Rule",
    "RulePattern",
    "clean_hint",
    "redact",
]


class Category(enum.StrEnum):
    """What kind of failure a hint describes. Values are wire-visible (``error_category``)."""

    UNRESOLVED_REFERENCE = "unresolved_reference"  # ${steps.N.path} names a key step N lacks
    UNAVAILABLE_REFERENCE = "unavailable_reference"  # ${steps.N…} names a step not completed
    UNKNOWN_TOOL = "unknown_tool"  # the step called a tool that is not registered
    FOREIGN_KEY = "foreign_key"  # a referenced row is missing (or a row is still referenced)
    UNIQUE_VIOLATION = "unique_violation"  # a row with the same unique value exists
    NOT_NULL = "not_null"  # a required column got no value
    MISSING_COLUMN = "missing_column"  # SQL names a column the table lacks
    MISSING_TABLE = "missing_table"  # SQL names a table that does not exist
    NOT_FOUND = "not_found"  # a record looked up by id does not exist
    MISSING_FIELD = "missing_field"  # input validation: a required field is absent
    KEY_ERROR = "key_error"  # code read a key the data does not have
    MISSING_ARGUMENT = "missing_argument"  # a function was called without a required argument
    NULL_ATTRIBUTE = "null_attribute"  # an attribute read on None / undefined / null
    NULL_POINTER = "null_pointer"  # Java NPE, Go nil dereference, .NET null reference
    INVALID_INTEGER = "invalid_integer"  # text that should have been a number
    TYPE_MISMATCH = "type_mismatch"  # a value of the wrong type
    PATH_ESCAPE = "path_escape"  # a path outside the sandbox ('..', absolute, symlink)
    FILE_NOT_FOUND = "file_not_found"  # no such file or directory
    PERMISSION_DENIED = "permission_denied"  # the OS or the database refused access
    RATE_LIMITED = "rate_limited"  # HTTP 429, throttling, quota
    HTTP_AUTH = "http_auth"  # HTTP 401/403, bad credentials
    HTTP_NOT_FOUND = "http_not_found"  # HTTP 404, gRPC NOT_FOUND
    HTTP_CLIENT = "http_client"  # any other 4xx: the request itself was rejected
    SERVER_ERROR = "server_error"  # HTTP 5xx
    TIMEOUT = "timeout"  # deadline exceeded, timed out
    CONNECTION = "connection"  # refused, reset, unreachable, DNS failure
    MALFORMED_JSON = "malformed_json"  # JSON that does not parse
    UNKNOWN = "unknown"  # no rule matched: the fallback


# The controller retries the same step for these: the failure is in the outside world and the
# same call may well succeed a moment later, so no earlier step is at fault.
TRANSIENT_CATEGORIES: frozenset[str] = frozenset(
    c.value
    for c in (Category.TIMEOUT, Category.RATE_LIMITED, Category.CONNECTION, Category.SERVER_ERROR)
)

# The controller also retries the same step for these: the step's own arguments are wrong in a
# way the agent fixes by sending the step again with other arguments. Categories that name a key
# (key_error, not_null, foreign_key, …) are left out on purpose: there the bad value usually came
# from an earlier step, and the dependency jump to that step is the better move.
ARGUMENT_CATEGORIES: frozenset[str] = frozenset(
    c.value
    for c in (
        Category.UNKNOWN_TOOL,
        Category.MISSING_ARGUMENT,
        Category.MISSING_FIELD,
        Category.INVALID_INTEGER,
        Category.TYPE_MISMATCH,
        Category.MALFORMED_JSON,
    )
)

MAX_INPUT_CHARS = 64 * 1024  # longer input keeps its first quarter and its last three quarters
DEFAULT_MAX_LEN = 240
_MIN_MAX_LEN = 40  # room for "Hint: " and a few words
_PREFIX = "Hint: "
_ELLIPSIS = "…"
_MASK = "***"
_VALUE_CAP = 100  # one captured value may not crowd the action out of the hint
_KEY_CAP = 128
_WORK_CAP = 2000  # a fallback message is cut to this before redaction (see _finish)
_BUILTIN = "hint_rules.toml"


@dataclass(frozen=True, slots=True)
class Hint:
    """The cleaned form of one failure."""

    text: str  # one line, <= max_len chars, starts "Hint: ", no stack frames, secrets redacted
    category: str  # a Category value
    rule: str  # id of the rule that matched, or "fallback"
    key: str  # the key/field/column/argument the error names; "" if none

    @property
    def transient(self) -> bool:
        """True iff retrying the same step unchanged may succeed (see TRANSIENT_CATEGORIES)."""
        return self.category in TRANSIENT_CATEGORIES


# --- Redaction ----------------------------------------------------------------------------------


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
            ("pass", "pwd", "secret", "token", "_key", "-key", "apikey", "credential", "session"),
            r"(?:passw(?:or)?d|passphrase|pwd|secret|token(?!s)|api[_-]?key|apikey|access[_-]?key"
            r"|private[_-]?key|auth[_-]?key|credentials?|session[_-]?(?:id|key|token))"
            r"[\w-]{0,40}?[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']?"
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
_SECRET_NAME = re.compile(r"passw|pwd|secret|token|api[_-]?key|apikey|credential|private[_-]?key")


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
        for match in redaction.pattern.finditer(low):
            start, end = match.span("s")
            pieces.append(text[last:start])
            pieces.append(_MASK)
            last = end
        if pieces:
            pieces.append(text[last:])
            text = "".join(pieces)
            low = _lower_same_length(text)
    return text


def _lower_same_length(text: str) -> str:
    # str.lower is fast but may change the length ("İ" becomes two characters); the spans
    # found in the lowered copy must index the original, so fall back to ASCII-only lowering.
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


# --- Templates ----------------------------------------------------------------------------------

# A template compiles to segments; a segment is (optional, pieces), a piece is (is_group, text).
# An optional segment ("[ ... ]" in the source) is dropped when one of its groups is empty.
_Piece = tuple[bool, str]
_Segment = tuple[bool, tuple[_Piece, ...]]
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _compile_template(source: str) -> tuple[_Segment, ...]:
    segments: list[_Segment] = []
    pieces: list[_Piece] = []
    literal: list[str] = []
    optional = False

    def flush_literal() -> None:
        if literal:
            pieces.append((False, "".join(literal)))
            literal.clear()

    def close_segment(was_optional: bool) -> None:
        flush_literal()
        if pieces:
            segments.append((was_optional, tuple(pieces)))
            pieces.clear()

    i = 0
    while i < len(source):
        pair = source[i : i + 2]
        if pair in ("[[", "]]", "{{", "}}"):  # doubled: a literal bracket or brace
            literal.append(pair[0])
            i += 2
            continue
        char = source[i]
        if char == "[":
            if optional:
                raise ValueError(f"'[' at position {i}: optional parts cannot nest")
            close_segment(False)
            optional = True
        elif char == "]":
            if not optional:
                raise ValueError(f"']' at position {i} closes nothing")
            close_segment(True)
            optional = False
        elif char == "{":
            match = _PLACEHOLDER.match(source, i)
            if match is None:
                raise ValueError(f"'{{' at position {i} does not start a {{group}} placeholder")
            flush_literal()
            pieces.append((True, match[1]))
            i = match.end()
            continue
        elif char == "}":
            raise ValueError(f"'}}' at position {i} closes nothing")
        else:
            literal.append(char)
        i += 1
    if optional:
        raise ValueError("an optional part '[' is never closed")
    close_segment(False)
    return tuple(segments)


def _template_groups(segments: tuple[_Segment, ...], *, optional: bool) -> set[str]:
    return {
        text
        for is_optional, pieces in segments
        if is_optional == optional
        for is_group, text in pieces
        if is_group
    }


def _render(segments: tuple[_Segment, ...], values: Mapping[str, str]) -> str:
    out: list[str] = []
    for optional, pieces in segments:
        chunk: list[str] = []
        for is_group, text in pieces:
            if not is_group:
                chunk.append(text)
                continue
            value = values.get(text, "")
            if not value and optional:
                break
            chunk.append(value)
        else:
            out.extend(chunk)
    return "".join(out)


# --- Rules --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RulePattern:
    """One regular expression of a rule and the template its match renders."""

    regex: re.Pattern[str]  # compiled with re.MULTILINE
    template: str  # source text, without the "Hint: " prefix
    segments: tuple[_Segment, ...]  # the compiled template


@dataclass(frozen=True, slots=True)
class Rule:
    """One entry of the ordered rule table."""

    id: str
    category: Category
    patterns: tuple[RulePattern, ...]  # tried in order; the first that matches renders the hint
    needles: tuple[str, ...]  # lowercase; () = always tried, else only if one occurs in the error
    key_group: str  # the named group that becomes Hint.key ("" = none)
    source: str  # the rule file's path, or "builtin"


_RULE_FIELDS = frozenset({"id", "category", "needles", "template", "key", "patterns"})
_PATTERN_FIELDS = frozenset({"regex", "template"})
_CATEGORY_VALUES = frozenset(c.value for c in Category)
_RULE_ID = re.compile(r"[A-Za-z][\w.\-]{0,63}")


def _parse_rules(document: Mapping[str, Any], source: str) -> tuple[Rule, ...]:
    unknown = sorted(set(document) - {"rule"})
    if unknown:
        raise InvalidArgument(
            f"hint rules {source}: unknown top-level key(s) {', '.join(unknown)}; "
            "write each rule as a [[rule]] table"
        )
    entries = document.get("rule", [])
    if not isinstance(entries, list):
        raise InvalidArgument(f"hint rules {source}: 'rule' must be an array of [[rule]] tables")
    return tuple(_parse_rule(entry, source, number) for number, entry in enumerate(entries, 1))


def _parse_rule(entry: Any, source: str, number: int) -> Rule:
    rule_id = entry.get("id") if isinstance(entry, dict) else None
    where = f"hint rules {source}: rule " + (
        repr(rule_id) if isinstance(rule_id, str) and rule_id else f"#{number}"
    )

    def fail(problem: str) -> InvalidArgument:
        return InvalidArgument(f"{where}: {problem}")

    if not isinstance(entry, dict):
        raise fail("is not a table")
    if not isinstance(rule_id, str) or not _RULE_ID.fullmatch(rule_id):
        raise fail("needs an 'id': a letter, then letters, digits, '_', '.' or '-' (max 64)")
    unknown = sorted(set(entry) - _RULE_FIELDS)
    if unknown:
        raise fail(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(_RULE_FIELDS)}")
    category = entry.get("category")
    if not isinstance(category, str) or category not in _CATEGORY_VALUES:
        raise fail(f"'category' {category!r} is not one of: {', '.join(Category)}")
    needles = entry.get("needles", [])
    if not isinstance(needles, list) or not all(isinstance(n, str) and n for n in needles):
        raise fail("'needles' must be a list of non-empty strings")
    key_group = entry.get("key", "key")
    if not isinstance(key_group, str):
        raise fail("'key' must be the name of a group (a string)")
    default_template = entry.get("template")
    if default_template is not None and not isinstance(default_template, str):
        raise fail("'template' must be a string")
    raw_patterns = entry.get("patterns")
    if not isinstance(raw_patterns, list) or not raw_patterns:
        raise fail("needs 'patterns': a non-empty list of regular expressions")

    patterns: list[RulePattern] = []
    for index, item in enumerate(raw_patterns, 1):
        template = default_template
        if isinstance(item, dict):
            extra = sorted(set(item) - _PATTERN_FIELDS)
            if extra:
                raise fail(f"pattern {index}: unknown field(s) {', '.join(extra)}")
            regex_source = item.get("regex")
            template = item.get("template", default_template)
        else:
            regex_source = item
        if not isinstance(regex_source, str) or not regex_source:
            raise fail(f"pattern {index}: the regex must be a non-empty string")
        if not isinstance(template, str) or not template.strip():
            raise fail(f"pattern {index} has no template (set 'template' on the rule or pattern)")
        template = template.removeprefix(_PREFIX)
        try:
            regex = re.compile(regex_source, re.MULTILINE)
        except (re.error, OverflowError, RecursionError) as exc:
            raise fail(f"pattern {index} is not a valid regular expression: {exc}") from exc
        try:
            segments = _compile_template(template)
        except ValueError as exc:
            raise fail(f"template of pattern {index}: {exc}") from exc
        missing = _template_groups(segments, optional=False) - set(regex.groupindex)
        if missing:
            raise fail(
                f"pattern {index} has no group(s) {', '.join(sorted(missing))} "
                "that its template requires (put them in [ ... ] if they are optional)"
            )
        patterns.append(RulePattern(regex, template, segments))

    all_groups = {name for p in patterns for name in p.regex.groupindex}
    for pattern in patterns:
        unknown_groups = _template_groups(pattern.segments, optional=True) - all_groups
        if unknown_groups:
            raise fail(f"template uses {', '.join(sorted(unknown_groups))}, which no pattern has")
    if "key" in entry and key_group and key_group not in all_groups:
        raise fail(f"'key' names group {key_group!r}, which no pattern has")
    return Rule(
        id=rule_id,
        category=Category(category),
        patterns=tuple(patterns),
        needles=tuple(n.lower() for n in needles),
        key_group=key_group,
        source=source,
    )


def _load_rule_file(path: str | os.PathLike[str]) -> tuple[Rule, ...]:
    name = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise InvalidArgument(f"hint rules {name}: cannot read the file: {exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"hint rules {name}: not valid TOML: {exc}") from exc
    return _parse_rules(document, name)


@functools.cache
def _builtin_rules() -> tuple[Rule, ...]:
    # Parsed once per process: every cleaner shares the same immutable rules.
    text = resources.files("agenttx.core").joinpath(_BUILTIN).read_text(encoding="utf-8")
    return _parse_rules(tomllib.loads(text), "builtin")


# --- Stack frames and the fallback --------------------------------------------------------------

# Lines that locate code rather than describe the failure. Each alternative starts right after a
# "\n" (the input gets one prepended), so the scan jumps from line start to line start. The
# indented kinds share one possessive indentation: each continues with a character that is not
# a space or tab, so giving indentation back could never help, and an indented line is no
# longer re-scanned (and backtracked over) once per kind.
_FRAMES = re.compile(
    r"\n(?:"
    r"[ \t]++(?:"
    r"File \"[^\n]*+(?:\n    [^\n]*+)*+"  # Python frame, its source and caret lines
    r"|at [^\n]*+"  # Java, Node.js, .NET, Rust "at file:line"
    r"|\d+: +(?:0x[0-9a-fA-F]+ - )?(?:<|_|[\w$.]*::)[^\n]*+"  # Rust backtrace symbol
    r"|from [^\n]*:\d+:in [^\n]*+"  # Ruby
    r")"
    r"|[ \t]*+(?:"
    r"\.\.\. \d+ (?:more|common frames omitted)[^\n]*+"  # Java, elided frames
    r"|\[Previous line repeated [^\n]*+"  # Python recursion
    r")"
    r"|goroutine \d+ \[[^\]\n]*\]:[^\n]*+"  # Go
    r"|Traceback \(most recent call last\):[^\n]*+"
    r"|During handling of the above exception, another exception occurred:[^\n]*+"
    r"|The above exception was the direct cause of the following exception:[^\n]*+"
    r"|[Ss]tack backtrace:[^\n]*+"
    r"|note: run with `RUST_BACKTRACE=[^\n]*+"
    r"|Node\.js v\d[^\n]*+"
    r"|exit status \d+[^\n]*+"
    r"|[^\n]*+\n\t[^\n]*\.go:\d+[^\n]*+"  # Go: function line, then its tab-indented file line
    r")"
)
# Possessive repeats ("*+") where nothing after them needs characters back: the regex engine
# then keeps no backtracking state per character, which makes this pass about 15 % faster.

_EXCEPTION_LINE = re.compile(
    r"(?:Uncaught |Unhandled(?: rejection)? |Exception in thread \"[^\"]*\" )?"
    r"(?:[A-Za-z_$][\w$]*(?:\.|::))*"
    r"(?:[A-Z][\w$]*(?:Error|Exception|Exit|Interrupt|Fault|Failure|Panic|Violation|Mismatch"
    r"|Warning|Rejection)(?:\[[^\]]*\])?"
    r"|[Ee]rror(?:\[\w+\])?|ERROR|Exception|panic|[Ff]atal(?: error)?|FATAL)"
    r"(?::.*)?"
)
# A frame that did not look like one in place (not indented, after "Caused by:"): the fallback
# never picks such a line. Narrower than _FRAMES, which may remove any indented "at …" line.
_FRAME_TEXT = re.compile(
    r"File \"[^\"\n]*\", line \d+"
    r"|at [\w$.<>\[\]/-]+(?: \[as [\w$]+\])? ?\(?[^()\s]*:\d+(?::\d+)?\)?$"
    r"|\.\.\. \d+ (?:more|common frames omitted)"
    r"|\d+: +(?:0x[0-9a-fA-F]+ - )?(?:<|_|[\w$.]*::)"
    r"|Traceback \(most recent call last\)"
)
_RUST_PANIC = re.compile(r"thread '[^']*' panicked at (?:'(?P<msg>.*)', \S+|\S+:)")
_QUALIFIER = re.compile(r"(?:[a-z_$][\w$]*(?:\.|::))+(?=[A-Z])")
_GENERIC_PREFIX = re.compile(r"(?:Uncaught |Unhandled )?(?:Error|error|ERROR|Exception): +(?=\S)")
_CAUSE_INDEX = re.compile(r"\d+: +")


def _fallback_message(message: str) -> str:
    """The most telling line of a failure no rule recognised ("" if there is none)."""
    lines = [line.strip() for line in message.split("\n")]
    lines = [
        "" if _FRAME_TEXT.match(line.removeprefix("Caused by:").lstrip()) else line
        for line in lines
    ]
    # 1. The deepest cause: Java and anyhow print the root cause last, after "Caused by:".
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Caused by:"):
            cause = lines[i][len("Caused by:") :].strip()
            if not cause:  # anyhow: the causes follow, one per line, "0: …", "1: …"
                following: list[str] = []
                for line in lines[i + 1 :]:
                    if not line:
                        if following:
                            break
                        continue
                    following.append(line)
                cause = _CAUSE_INDEX.sub("", following[-1], count=1) if following else ""
            if _FRAME_TEXT.match(cause):  # an anyhow cause line shaped like a frame
                cause = ""
            if cause:
                return _short_exception(cause)
            break
    # 2. The last exception-like line (Python prints the outermost exception last).
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        panic = _RUST_PANIC.match(line)
        if panic is not None:
            if panic["msg"]:
                return panic["msg"]
            rest = [following for following in lines[i + 1 :] if following]
            return rest[0] if rest else line
        if _EXCEPTION_LINE.fullmatch(line):
            return _short_exception(line)
    # 3. The last line with anything on it.
    for line in reversed(lines):
        if line:
            return line
    return ""


def _short_exception(line: str) -> str:
    """``pkg.mod.LedgerError: x`` -> ``LedgerError: x``; ``Error: x`` -> ``x``."""
    qualifier = _QUALIFIER.match(line)
    if qualifier is not None:
        line = line[qualifier.end() :]
    generic = _GENERIC_PREFIX.match(line)
    return line[generic.end() :] if generic is not None else line


def _cap(raw: str) -> str:
    if len(raw) <= MAX_INPUT_CHARS:
        return raw
    # The head holds the first exception line (Java, Go, Node); the tail holds Python's final
    # exception and the deepest "Caused by:", so the tail gets the larger share.
    head = MAX_INPUT_CHARS // 4
    return raw[:head] + "\n" + raw[len(raw) - (MAX_INPUT_CHARS - head) :]


# --- The cleaner --------------------------------------------------------------------------------

# A pattern that is only a named group of literal alternatives, like
# "(?P<reason>Bad Gateway|Service Unavailable)", matches iff one of them occurs. With no common
# first character the regex engine tries it at every position (~1 µs on a 300-character error);
# a substring scan per alternative skips ahead in C, so the cleaner scans first.
_LITERAL_ALTERNATION = re.compile(r"\(\?P<\w+>([\w ]+(?:\|[\w ]+)+)\)")
_Attempt = tuple[RulePattern, tuple[str, ...]]  # a pattern, and its literal alternatives or ()


def _literal_alternatives(regex: re.Pattern[str]) -> tuple[str, ...]:
    # Letters, digits, "_" and " " are literal in a regular expression (no verbose mode here).
    shape = _LITERAL_ALTERNATION.fullmatch(regex.pattern)
    if shape is None or regex.flags & (re.IGNORECASE | re.VERBOSE):
        return ()
    return tuple(shape[1].split("|"))


class HintCleaner:
    """Turns raw errors into hints with a fixed rule table.

    ``rule_files`` are TOML files of extra rules (format: ``docs/hints.md``); they are tried
    before the built-in rules, in the order given, and a rule whose id equals a built-in one
    replaces it. Raises ``InvalidArgument`` for an unreadable or invalid file, a duplicate rule
    id, or ``max_len`` < 40. Immutable after construction, so safe to share between threads.
    """

    __slots__ = ("_max_len", "_needles", "_rules")

    def __init__(
        self,
        rule_files: Sequence[str | os.PathLike[str]] = (),
        *,
        include_builtin: bool = True,
        max_len: int = DEFAULT_MAX_LEN,
    ) -> None:
        if max_len < _MIN_MAX_LEN:
            raise InvalidArgument(f"hint max_len must be at least {_MIN_MAX_LEN}, got {max_len}")
        user: list[Rule] = []
        defined_in: dict[str, str] = {}
        for path in rule_files:
            for rule in _load_rule_file(path):
                if rule.id in defined_in:
                    raise InvalidArgument(
                        f"hint rules {rule.source}: rule {rule.id!r} is already defined in "
                        f"{defined_in[rule.id]}"
                    )
                defined_in[rule.id] = rule.source
                user.append(rule)
        builtin = [r for r in _builtin_rules() if r.id not in defined_in] if include_builtin else []
        self._rules: tuple[Rule, ...] = (*user, *builtin)
        # Every rule's needles, in rule order, each with its rule, its patterns and how many of
        # the rule's needles follow it; a rule without needles is tried always, so it gets "",
        # which occurs in every text. One flat loop over these costs half the interpreter time
        # of a loop over rules with a loop over needles inside.
        needles: list[tuple[str, Rule, tuple[_Attempt, ...], int]] = []
        for rule in self._rules:
            attempts = tuple((p, _literal_alternatives(p.regex)) for p in rule.patterns)
            own = rule.needles or ("",)
            needles.extend((n, rule, attempts, len(own) - i) for i, n in enumerate(own, 1))
        self._needles = tuple(needles)
        self._max_len = max_len

    @property
    def rules(self) -> Sequence[Rule]:
        """The rule table in the order it is tried."""
        return self._rules

    def clean(self, raw: str) -> Hint:
        """The hint for ``raw``. Never raises."""
        try:
            return self._clean(raw)
        except Exception:
            # A hint exists to help after a failure; failing here would turn a tool error into
            # a server error. Only a bug gets here, and the fixed text is still a valid hint.
            return Hint(
                f"{_PREFIX}the tool failed and its error could not be read; check the arguments.",
                Category.UNKNOWN.value,
                "fallback",
                "",
            )

    def _clean(self, raw: str) -> Hint:
        text = _cap(raw)
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        message = _FRAMES.sub("", "\n" + text)
        low = message.lower()
        # A rule is tried at its first needle that occurs in the message, in rule order, until
        # one matches. One substring scan per needle: single-pass prefilters measured slower in
        # CPython 3.11 on the traces of benchmarks/hints.py: a regex alternation of all needles
        # (4x), a trie-shaped one (as slow, and it cannot stop at an early rule), a scan anchored
        # on rare characters, a bigram index. So rules keep few needles and patterns start with
        # a literal.
        entries = iter(self._needles)
        for needle, rule, attempts, rest in entries:
            if needle not in low:
                continue
            for pattern, alternatives in attempts:
                if alternatives:
                    for alternative in alternatives:
                        if alternative in message:
                            break
                    else:
                        continue  # none occurs, so the pattern cannot match
                match = pattern.regex.search(message)
                if match is not None:
                    return self._from_match(rule, pattern, match)
            if rest:  # the rule did not match: skip its other needles unscanned
                next(itertools.islice(entries, rest, rest), None)
        body = _fallback_message(message)
        if not body:
            body = "the tool failed without an error message; check its arguments and retry."
        return Hint(self._finish(body), Category.UNKNOWN.value, "fallback", "")

    def _from_match(self, rule: Rule, pattern: RulePattern, match: re.Match[str]) -> Hint:
        groups = match.groupdict()
        raw_key = groups.get(rule.key_group) if rule.key_group else None
        key = _clean_key(raw_key) if raw_key else ""
        # A value shown next to a secret's name (Key (password)=(hunter2)) is a secret too.
        hide_value = bool(key) and _SECRET_NAME.search(key.lower()) is not None
        values: dict[str, str] = {}
        for name, value in groups.items():
            if value is None:
                continue
            values[name] = _MASK if hide_value and name == "value" else _clean_value(value)
        if rule.key_group in values:
            values[rule.key_group] = key
        text = self._finish(_render(pattern.segments, values))
        return Hint(text, rule.category.value, rule.id, key)

    def _finish(self, body: str) -> str:
        if len(body) > _WORK_CAP:
            # Cut at a space so no secret is cut in two (a half secret may escape redaction).
            cut = body.rfind(" ", 0, _WORK_CAP)
            body = body[: cut if cut > 0 else _WORK_CAP]
        body = redact(" ".join(body.split()))
        if not body.isprintable():  # control characters, lone surrogates (invalid UTF-8)
            body = "".join(c if c.isprintable() else "\ufffd" for c in body)
        return _truncate(_PREFIX + body, self._max_len)


def _clean_value(value: str) -> str:
    # Whitespace is collapsed and secrets redacted once, on the whole text (_finish). A value
    # that gets cut is redacted first: half a secret might no longer look like one.
    if len(value) > _VALUE_CAP:
        value = redact(value)[: _VALUE_CAP - 1].rstrip() + _ELLIPSIS
    return value


def _clean_key(raw: str) -> str:
    key = " ".join(raw.split()).strip("'\"` ")[:_KEY_CAP]
    # Hint.key travels outside the text (wire field hint_key, traces), so it is redacted on
    # its own; an identifier of 15 characters or fewer cannot hold any secret we recognise.
    # Nor can "" (many rules name no key): redact("") would still run every needle scan.
    return key if not key or (len(key) <= 15 and key.isidentifier()) else redact(key)


def _truncate(text: str, max_len: int) -> str:
    if len(text) <= max_len:
        return text
    cut = text[: max_len - len(_ELLIPSIS)]
    space = cut.rfind(" ", max_len - 30)
    if space > len(_PREFIX):  # end on a whole word when one ends near the limit
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + _ELLIPSIS


_default_cleaner: HintCleaner | None = None
_default_lock = threading.Lock()


def clean_hint(raw: str) -> Hint:
    """``HintCleaner().clean(raw)`` with one shared cleaner of the built-in rules."""
    global _default_cleaner
    cleaner = _default_cleaner
    if cleaner is None:
        with _default_lock:  # built once even when first called from several threads
            if _default_cleaner is None:
                _default_cleaner = HintCleaner()
            cleaner = _default_cleaner
    return cleaner.clean(raw)
