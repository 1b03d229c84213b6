"""The hint template language: literal text, ``{group}`` placeholders filled from a rule's
regex match, and ``[ ... ]`` optional parts dropped when one of their groups is empty.
``[[``, ``]]``, ``{{`` and ``}}`` are literal brackets and braces.

A template compiles once, when its rule is loaded (``compile_template`` raises ``ValueError``
naming the position of a syntax error); rendering a compiled template never raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["Segment", "compile_template", "render", "template_groups"]

# A template compiles to segments; a segment is (optional, pieces), a piece is (is_group, text).
# An optional segment ("[ ... ]" in the source) is dropped when one of its groups is empty.
Piece = tuple[bool, str]
Segment = tuple[bool, tuple[Piece, ...]]
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def compile_template(source: str) -> tuple[Segment, ...]:
    segments: list[Segment] = []
    pieces: list[Piece] = []
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


def template_groups(segments: tuple[Segment, ...], *, optional: bool) -> set[str]:
    return {
        text
        for is_optional, pieces in segments
        if is_optional == optional
        for is_group, text in pieces
        if is_group
    }


def render(segments: tuple[Segment, ...], values: Mapping[str, str]) -> str:
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
