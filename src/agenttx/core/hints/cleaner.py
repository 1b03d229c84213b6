"""The cleaner: a raw error in, one ``Hint`` out.

The input is capped (``MAX_INPUT_CHARS``: first quarter and last three quarters kept), stack
frame lines are removed, what is left is cut to the rules' window (``RULE_WINDOW_CHARS``, lines
capped at ``MAX_LINE_CHARS``), then the ordered rule table is tried, first match wins. Nothing
matched: the message of the last ``Caused by:``, else of the last exception-like line, else the
first line.

Invariants:
- ``HintCleaner.clean`` never raises, and its result always satisfies the ``Hint.text``
  contract, with secrets redacted and no stack frame in it.
- Its time is linear in the input with a small constant, whatever the input: the frame pass
  is possessive (no backtracking), and the rules and the fallback, whose patterns have bounded
  repetitions, only ever see the window. A bounded repetition still costs its bound at every
  place its pattern is tried, and an adversary can make those places dense; the window is what
  bounds their number (``tests/core/test_hint_linear.py`` feeds every rule family 64 KiB texts built
  from its own tokens).
- Pure and deterministic; a cleaner is immutable once built, so one instance serves all threads.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from agenttx.core.hints.categories import TRANSIENT_CATEGORIES, Category
from agenttx.core.hints.rules import HINT_PREFIX, Rule, RulePattern, builtin_rules, load_rule_file
from agenttx.core.hints.templates import render
from agenttx.errors import InvalidArgument
from agenttx.redaction import MASK, SECRET_NAME, redact

__all__ = [
    "DEFAULT_MAX_LEN",
    "MAX_INPUT_CHARS",
    "MAX_LINE_CHARS",
    "RULE_WINDOW_CHARS",
    "Hint",
    "HintCleaner",
    "clean_hint",
]

MAX_INPUT_CHARS = 64 * 1024  # longer input keeps its first quarter and its last three quarters
# What the rules and the fallback read of the message once frames are out: its first quarter
# and last three quarters again (realistic errors are far shorter once frames are gone; a
# longer one is a dump, and its head and tail are what name the failure) ...
RULE_WINDOW_CHARS = 16 * 1024
# ... with each line cut to this (first quarter, "…", last three quarters), so that even a
# user rule with an unbounded ".*" costs at most this much per place it is tried.
MAX_LINE_CHARS = 2 * 1024
DEFAULT_MAX_LEN = 240
_MIN_MAX_LEN = 40  # room for "Hint: " and a few words
_ELLIPSIS = "…"
_VALUE_CAP = 100  # one captured value may not crowd the action out of the hint
_KEY_CAP = 128
_WORK_CAP = 2000  # a fallback message is cut to this before redaction (see _finish)


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
    r"|\d++: ++(?:0x[0-9a-fA-F]++ - )?(?:<|_|[\w$.]*+::)[^\n]*+"  # Rust backtrace symbol
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
    # The name is possessive: the path class contains it, so without that every split of a
    # long word between the two would be tried (quadratic: 20 s on "at " + 64 Ki letters).
    r"|at [\w$.<>\[\]/-]{1,500}+(?: \[as [\w$]{1,200}\])? ?"
    r"\(?[^()\s]{0,500}:\d{1,9}(?::\d{1,9})?\)?$"
    r"|\.\.\. \d+ (?:more|common frames omitted)"
    r"|\d+: +(?:0x[0-9a-fA-F]+ - )?(?:<|_|[\w$.]*::)"
    r"|Traceback \(most recent call last\)"
)
_RUST_PANIC = re.compile(r"thread '[^']*' panicked at (?:'(?P<msg>.*)', \S+|\S+:)")
_QUALIFIER = re.compile(r"(?:[a-z_$][\w$]*(?:\.|::))+(?=[A-Z])")
# ``tools.ledger.LedgerClosed: …``: an exception of a class _EXCEPTION_LINE does not know by
# its name; its package prefix is dropped all the same.
_QUALIFIED_CLASS = re.compile(r"(?:[a-z_$][\w$]*(?:\.|::))+[A-Z][\w$]*: ")
_GENERIC_PREFIX = re.compile(r"(?:Uncaught |Unhandled )?(?:Error|error|ERROR|Exception): +(?=\S)")
_CAUSE_INDEX = re.compile(r"\d+: +")
# A run of lines that are empty or only whitespace. The fallback reads one such line exactly as
# it reads many (all are skipped or all end a list of causes), and a text of nothing but
# newlines would otherwise cost a Python-level step per line: folded in C first.
_BLANK_LINES = re.compile(r"\n(?:[^\S\n]*+\n)+")


def _fallback_message(message: str) -> str:
    """The most telling line of a failure no rule recognised ("" if there is none)."""
    lines = [line.strip() for line in _BLANK_LINES.sub("\n\n", message).split("\n")]
    lines = [
        "" if line and _FRAME_TEXT.match(line.removeprefix("Caused by:").lstrip()) else line
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
    # 3. The first line with anything on it: a message that names no exception (a downstream
    #    server's text, an exception class the pattern does not know) says what went wrong
    #    first and adds detail after, and the detail alone would tell the agent nothing.
    for line in lines:
        if line:
            return _short_exception(line) if _QUALIFIED_CLASS.match(line) else line
    return ""


def _short_exception(line: str) -> str:
    """``pkg.mod.LedgerError: x`` -> ``LedgerError: x``; ``Error: x`` -> ``x``."""
    qualifier = _QUALIFIER.match(line)
    if qualifier is not None:
        line = line[qualifier.end() :]
    generic = _GENERIC_PREFIX.match(line)
    return line[generic.end() :] if generic is not None else line


def _cap(raw: str, limit: int = MAX_INPUT_CHARS) -> str:
    if len(raw) <= limit:
        return raw
    # The head holds the first exception line (Java, Go, Node); the tail holds Python's final
    # exception and the deepest "Caused by:", so the tail gets the larger share.
    head = limit // 4
    return raw[:head] + "\n" + raw[len(raw) - (limit - head) :]


def _window(message: str) -> str:
    """What the rules and the fallback read: at most ``RULE_WINDOW_CHARS`` of the message,
    no line longer than ``MAX_LINE_CHARS`` (see their comments)."""
    message = _cap(message, RULE_WINDOW_CHARS)
    if len(message) <= MAX_LINE_CHARS:
        return message
    lines = message.split("\n")
    if max(map(len, lines)) <= MAX_LINE_CHARS:
        return message
    head = MAX_LINE_CHARS // 4
    tail = MAX_LINE_CHARS - head - 1
    return "\n".join(
        line if len(line) <= MAX_LINE_CHARS else line[:head] + _ELLIPSIS + line[-tail:]
        for line in lines
    )


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
            for rule in load_rule_file(path):
                if rule.id in defined_in:
                    raise InvalidArgument(
                        f"hint rules {rule.source}: rule {rule.id!r} is already defined in "
                        f"{defined_in[rule.id]}"
                    )
                defined_in[rule.id] = rule.source
                user.append(rule)
        builtin = [r for r in builtin_rules() if r.id not in defined_in] if include_builtin else []
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
                HINT_PREFIX
                + "the tool failed and its error could not be read; check the arguments.",
                Category.UNKNOWN.value,
                "fallback",
                "",
            )

    def _clean(self, raw: str) -> Hint:
        text = _cap(raw)
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        message = _window(_FRAMES.sub("", "\n" + text))
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
        hide_value = bool(key) and SECRET_NAME.search(key.lower()) is not None
        values: dict[str, str] = {}
        for name, value in groups.items():
            if value is None:
                continue
            values[name] = MASK if hide_value and name == "value" else _clean_value(value)
        if rule.key_group in values:
            values[rule.key_group] = key
        text = self._finish(render(pattern.segments, values))
        return Hint(text, rule.category.value, rule.id, key)

    def _finish(self, body: str) -> str:
        if len(body) > _WORK_CAP:
            # Cut at a space so no secret is cut in two (a half secret may escape redaction).
            cut = body.rfind(" ", 0, _WORK_CAP)
            body = body[: cut if cut > 0 else _WORK_CAP]
        body = redact(" ".join(body.split()))
        if not body.isprintable():  # control characters, lone surrogates (invalid UTF-8)
            body = "".join(c if c.isprintable() else "\ufffd" for c in body)
        return _truncate(HINT_PREFIX + body, self._max_len)


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
    if space > len(HINT_PREFIX):  # end on a whole word when one ends near the limit
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
