"""The rule table's loader: TOML documents of ``[[rule]]`` tables (format: docs/hints.md)
turned into immutable ``Rule`` values, with every regex and template compiled.

Invariants: a rule that loads is complete (its templates only use groups its patterns have);
anything wrong in a file fails here, as ``InvalidArgument`` naming the file, the rule and the
problem. The built-in rules (``hint_rules.toml`` beside this module) are parsed once per
process.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from agenttx.core.hints.categories import Category
from agenttx.core.hints.templates import Segment, compile_template, template_groups
from agenttx.errors import InvalidArgument
from agenttx.plural import named

__all__ = ["HINT_PREFIX", "Rule", "RulePattern", "builtin_rules", "load_rule_file"]

HINT_PREFIX = "Hint: "  # every hint starts so; a template may repeat it, it is dropped
_BUILTIN = "hint_rules.toml"


@dataclass(frozen=True, slots=True)
class RulePattern:
    """One regular expression of a rule and the template its match renders."""

    regex: re.Pattern[str]  # compiled with re.MULTILINE
    template: str  # source text, without the "Hint: " prefix
    segments: tuple[Segment, ...]  # the compiled template


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
            f"hint rules {source}: unknown top-level {named('key', unknown)}; "
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
        raise fail(f"unknown {named('field', unknown)}; allowed: {', '.join(_RULE_FIELDS)}")
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
                raise fail(f"pattern {index}: unknown {named('field', extra)}")
            regex_source = item.get("regex")
            template = item.get("template", default_template)
        else:
            regex_source = item
        if not isinstance(regex_source, str) or not regex_source:
            raise fail(f"pattern {index}: the regex must be a non-empty string")
        if not isinstance(template, str) or not template.strip():
            raise fail(f"pattern {index} has no template (set 'template' on the rule or pattern)")
        template = template.removeprefix(HINT_PREFIX)
        try:
            regex = re.compile(regex_source, re.MULTILINE)
        except (re.error, OverflowError, RecursionError) as exc:
            raise fail(f"pattern {index} is not a valid regular expression: {exc}") from exc
        try:
            segments = compile_template(template)
        except ValueError as exc:
            raise fail(f"template of pattern {index}: {exc}") from exc
        missing = template_groups(segments, optional=False) - set(regex.groupindex)
        if missing:
            raise fail(
                f"pattern {index} has no {named('group', sorted(missing))} "
                "that its template requires (put them in [ ... ] if they are optional)"
            )
        patterns.append(RulePattern(regex, template, segments))

    all_groups = {name for p in patterns for name in p.regex.groupindex}
    for pattern in patterns:
        unknown_groups = template_groups(pattern.segments, optional=True) - all_groups
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


# A rule file is a few dozen rules; the cap (as for --policy and --gateway files) keeps a
# wrong path — a log, a dump — from being read whole and parsed at start.
MAX_RULE_FILE_BYTES = 1 << 20


def load_rule_file(path: str | os.PathLike[str]) -> tuple[Rule, ...]:
    name = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_RULE_FILE_BYTES:
                raise InvalidArgument(
                    f"hint rules {name}: the file is {size} bytes, over the "
                    f"{MAX_RULE_FILE_BYTES}-byte limit; a rule file holds a few dozen rules — "
                    "check the path"
                )
            document = tomllib.load(handle)
    except OSError as exc:
        raise InvalidArgument(f"hint rules {name}: cannot read the file: {exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"hint rules {name}: not valid TOML: {exc}") from exc
    return _parse_rules(document, name)


@functools.cache
def builtin_rules() -> tuple[Rule, ...]:
    # Parsed once per process: every cleaner shares the same immutable rules.
    text = resources.files("agenttx.core.hints").joinpath(_BUILTIN).read_text(encoding="utf-8")
    return _parse_rules(tomllib.loads(text), "builtin")
