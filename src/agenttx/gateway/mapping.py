"""Undo and ``before`` argument mapping: ``${args.…}``, ``${output.…}``, ``${before.…}``.

The same rules as step references (``docs/references.md``): a string that is exactly one
reference becomes the value with its JSON type, a reference inside a longer string is
interpolated (strings verbatim, other values as compact JSON), ``$${`` is a literal ``${``,
numeric segments index arrays. One addition: a ``*`` segment maps the rest of the path over
every item of an array (``${args.entities.*.name}`` is the list of the entities' names).
A reference that does not resolve raises ``MappingError`` naming it and what is there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from agenttx.plural import plural

_TOKEN = re.compile(
    r"(?P<esc>\$\$\{)"
    r"|\$\{(?P<root>args|output|before)(?P<path>(?:\.[^.{}]+)*)\}"
    r"|(?P<bad>\$\{(?:args|output|before)\b[^}]*\}?)"
)
_WHOLE = re.compile(r"\$\{(args|output|before)((?:\.[^.{}]+)*)\}")
_MAX_SHOWN_KEYS = 20


class MappingError(ValueError):
    """A reference in an undo or ``before`` mapping that cannot be resolved."""


def roots_used(template: Any) -> set[str]:
    """Which of ``args``, ``output``, ``before`` the template refers to."""
    found: set[str] = set()
    stack = [template]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            found.update(m.group("root") for m in _TOKEN.finditer(value) if m.group("root"))
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


def check_template(template: Any, roots: Collection[str]) -> None:
    """Raise ``MappingError`` for what is wrong before any call is made: a reference whose
    syntax does not parse, or one to a source this mapping never has (``roots``: a ``before``
    call's arguments have only ``args``; an undo has ``before`` only with a ``before`` call).
    The gateway file is checked so at load, where a mistake is refused with its line."""
    stack = [template]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and "${" in value:
            for match in _TOKEN.finditer(value):
                if match.group("bad") is not None:
                    raise _bad_syntax(match.group("bad"))
                root = match.group("root")
                if root is not None and root not in roots:
                    have = ", ".join(f"${{{r}.…}}" for r in sorted(roots))
                    raise MappingError(
                        f"reference {match.group(0)} can never resolve: there is no {root} "
                        f"for this call (it has {have})"
                    )


def _bad_syntax(text: str) -> MappingError:
    return MappingError(
        f"bad reference syntax {text!r}: write ${{args.<path>}}, "
        "${output.<path>} or ${before.<path>}, or $${ for a literal ${"
    )


def apply_mapping(template: Any, sources: Mapping[str, Any]) -> Any:
    """A fresh copy of ``template`` with every reference replaced from ``sources``."""
    if isinstance(template, str):
        return _string(template, sources)
    if isinstance(template, dict):
        return {k: apply_mapping(v, sources) for k, v in template.items()}
    if isinstance(template, list):
        return [apply_mapping(v, sources) for v in template]
    return template


def _string(text: str, sources: Mapping[str, Any]) -> Any:
    if "${" not in text:
        return text
    whole = _WHOLE.fullmatch(text)
    if whole is not None:
        return _lookup(whole.group(0), whole.group(1), _split(whole.group(2)), sources)
    parts: list[str] = []
    position = 0
    for match in _TOKEN.finditer(text):
        parts.append(text[position : match.start()])
        position = match.end()
        if match.group("esc") is not None:
            parts.append("${")
            continue
        if match.group("root") is None:
            raise _bad_syntax(match.group("bad"))
        value = _lookup(match.group(0), match.group("root"), _split(match.group("path")), sources)
        parts.append(value if isinstance(value, str) else _compact(value))
    parts.append(text[position:])
    return "".join(parts)


def _split(path: str) -> list[str]:
    return path.split(".")[1:] if path else []


def _lookup(text: str, root: str, path: list[str], sources: Mapping[str, Any]) -> Any:
    if root not in sources:
        raise MappingError(f"unresolved reference {text}: there is no {root} for this call")
    return _walk(text, root, sources[root], path, 0)


def _walk(text: str, root: str, value: Any, path: list[str], depth: int) -> Any:
    for n in range(depth, len(path)):
        segment = path[n]
        if segment == "*":
            if not isinstance(value, list):
                raise _missing(text, root, path, n, value, "'*' needs an array")
            return [_walk(text, root, item, path, n + 1) for item in value]
        if isinstance(value, dict) and segment in value:
            value = value[segment]
        elif isinstance(value, list) and segment.isascii() and segment.isdigit():
            index = int(segment) if len(segment) <= 18 else len(value)
            if index >= len(value):
                raise _missing(text, root, path, n, value, f"no index {segment}")
            value = value[index]
        else:
            raise _missing(text, root, path, n, value, f"no key {segment!r}")
    return value


def _missing(
    text: str, root: str, path: list[str], depth: int, container: Any, what: str
) -> MappingError:
    where = ".".join([root, *path[:depth]])
    if isinstance(container, dict):
        keys = sorted(str(k) for k in container)
        shown = ", ".join(keys[:_MAX_SHOWN_KEYS]) + (" …" if len(keys) > _MAX_SHOWN_KEYS else "")
        detail = f"keys: {shown}" if keys else "it has no keys"
    elif isinstance(container, list):
        detail = f"it is an array of {plural(len(container), 'item')}"
    else:
        detail = f"it is {json.dumps(container)[:40]}"
    return MappingError(f"unresolved reference {text}: {where} has {what} ({detail})")


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
