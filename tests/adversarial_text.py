"""Adversarial texts for a regular expression, built from its own tokens.

For a pattern this walks the parsed regex (``re._parser``, the parser ``re.compile`` itself
uses) and writes strings that make a backtracking engine work hard: the pattern's literal
tokens repeated, a near-match (a matching string with its last character cut off) repeated,
and, for every repetition in the pattern, a string where that repetition's body runs on for
the whole text while what must follow it never comes — the ``"\\nat " + "a" * 65000`` shape.
Every text is ``size`` characters long, cut at a character boundary.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

try:  # Python 3.11+: the parser is re._parser (sre_parse before, deprecated)
    from re import _constants as C  # type: ignore[attr-defined]
    from re import _parser as P  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as P  # type: ignore[no-redef]

_SAMPLES = "a A0_ .:-/'\"`()[]{}$=,;\n\t"
_MAX_UNBOUNDED = 40  # a repeat without an upper bound is written this many times


def _class_sample(items: list[tuple[Any, Any]]) -> str:
    """A character the class (``IN`` items) matches, preferring word characters."""
    negate = any(op is C.NEGATE for op, _ in items)
    matched = []
    for ch in _SAMPLES + "x1":
        hit = False
        for op, av in items:
            if (op is C.LITERAL and chr(av) == ch) or (op is C.RANGE and av[0] <= ord(ch) <= av[1]):
                hit = True
            elif op is C.CATEGORY:
                hit = hit or bool(_category_match(av, ch))
        if hit != negate:
            matched.append(ch)
    return matched[0] if matched else "a"


def _category_match(category: Any, ch: str) -> bool:
    name = str(category)
    table = {
        "CATEGORY_DIGIT": ch.isdigit(),
        "CATEGORY_NOT_DIGIT": not ch.isdigit(),
        "CATEGORY_SPACE": ch.isspace(),
        "CATEGORY_NOT_SPACE": not ch.isspace(),
        "CATEGORY_WORD": ch.isalnum() or ch == "_",
        "CATEGORY_NOT_WORD": not (ch.isalnum() or ch == "_"),
    }
    for key, value in table.items():
        if name.endswith(key):
            return value
    return False


def _write(pattern: Any, *, longest: bool) -> str:
    """One string the parsed ``pattern`` matches (ignoring lookarounds and anchors): each
    repeat at its minimum (at least once), or at its maximum when ``longest``."""
    out: list[str] = []
    for op, av in pattern:
        if op is C.LITERAL:
            out.append(chr(av))
        elif op is C.NOT_LITERAL:
            out.append("a" if chr(av) != "a" else "b")
        elif op is C.ANY:
            out.append("a")
        elif op is C.IN:
            out.append(_class_sample(av))
        elif op is C.SUBPATTERN:
            out.append(_write(av[-1], longest=longest))
        elif op is C.BRANCH:
            out.append(_write(av[1][0], longest=longest))
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            low, high, body = av
            if longest:
                count = _MAX_UNBOUNDED if high is C.MAXREPEAT else min(high, 400)
            else:
                count = max(low, 1)
            out.append(_write(body, longest=longest) * count)
        elif op is C.ATOMIC_GROUP:
            out.append(_write(av, longest=longest))
        elif op is C.GROUPREF:
            out.append("a")
        # AT (anchors), ASSERT, ASSERT_NOT: nothing to write
    return "".join(out)


def _repeats(pattern: Any, prefix: list[Any]) -> Iterator[tuple[list[Any], Any, list[Any]]]:
    """Every repeat in ``pattern``: (what comes before it, its body, what comes after it),
    as item lists of the enclosing sequence (only the top-level sequence is split)."""
    items = list(pattern)
    for i, (op, av) in enumerate(items):
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            yield prefix + items[:i], av[2], items[i + 1 :]
        if op is C.SUBPATTERN:
            yield from _repeats(av[-1], prefix + items[:i])
        if op is C.BRANCH:
            for branch in av[1]:
                yield from _repeats(branch, prefix + items[:i])


def _fill(unit: str, size: int) -> str:
    if not unit:
        return ""
    return (unit * (size // len(unit) + 1))[:size]


def adversarial_texts(regex: str, flags: int = 0, size: int = 64 << 10) -> Iterator[str]:
    """Texts of ``size`` characters built from ``regex``'s own tokens (see the module)."""
    parsed = P.parse(regex, flags)
    shortest = _write(parsed, longest=False)
    longest = _write(parsed, longest=True)
    for unit in (shortest, longest):
        yield _fill(unit, size)  # matches packed end to end
        yield _fill(unit[:-1], size)  # near-matches: all but the last character
        yield _fill(unit[:-1] + "\n", size)  # near-matches, one per line
        yield _fill(unit[: len(unit) // 2], size)  # half matches
    for before, body, after in _repeats(parsed, []):
        head = _write(before, longest=False)
        run = _write(body, longest=False) or "a"
        tail = _write(after, longest=False)
        # The repeat's body runs on for the whole text; what follows never comes.
        yield (head + _fill(run, size))[:size]
        # Many heads, each followed by a long run and a broken tail.
        piece = head + run * 300 + tail[:-1]
        yield _fill(piece, size)
        yield _fill(piece + "\n", size)


def literal_tokens(regex: str, flags: int = 0) -> list[str]:
    """The literal runs of ``regex`` (what a rule's text is made of), longest first."""
    runs: list[str] = []

    def walk(pattern: Any) -> None:
        current: list[str] = []
        for op, av in pattern:
            if op is C.LITERAL:
                current.append(chr(av))
                continue
            if current:
                runs.append("".join(current))
                current = []
            if op is C.SUBPATTERN:
                walk(av[-1])
            elif op is C.BRANCH:
                for branch in av[1]:
                    walk(branch)
            elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
                walk(av[2])
            elif op in (C.ASSERT, C.ASSERT_NOT):
                walk(av[1])
            elif op is C.ATOMIC_GROUP:
                walk(av)
        if current:
            runs.append("".join(current))

    walk(P.parse(regex, flags))
    return sorted({r for r in runs if r.strip()}, key=len, reverse=True)


def token_soups(tokens: list[str], size: int = 64 << 10) -> Iterator[str]:
    """Texts of a rule's tokens mixed: all of them in a row, separated by spaces, by
    newlines, and each token followed by a run of its own last character."""
    if not tokens:
        return
    yield _fill("".join(tokens), size)
    yield _fill(" ".join(tokens) + " ", size)
    yield _fill("\n".join(tokens) + "\n", size)
    yield _fill("".join(t + t[-1] * 200 for t in tokens), size)


__all__ = ["adversarial_texts", "literal_tokens", "re", "token_soups"]
