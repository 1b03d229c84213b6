"""A listing's ``status`` filter in a query string, read and described from one place.

The parameter repeats (``?status=ACTIVE&status=COMMITTED``) and each value is a comma-separated
list of names (``?status=active,rolled_back``): any case of ASCII letters, spaces around a
name and empty entries ignored, an empty value no filter. ``StatusFilter.parse`` reads the
values the way ``pattern`` (the OpenAPI document's ``pattern`` of each value) says, with the
same regular expression, so a value the document admits is never refused and one it refuses
is never taken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agenttx.errors import InvalidArgument


def _any_case(name: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in name)


@dataclass(frozen=True)
class StatusFilter:
    """``names``: the canonical names, as the engine takes them (``ACTIVE``, ``pending``)."""

    what: str  # how the refusal names a status: "status", "effect status"
    names: tuple[str, ...]
    # The document's pattern of one value; ``_regex`` is it compiled (fullmatch: whole value).
    pattern: str = field(init=False)
    _regex: re.Pattern[str] = field(init=False, repr=False)
    _canonical: dict[str, str] = field(init=False, repr=False)  # lower case -> canonical

    def __post_init__(self) -> None:
        name = "(?:" + "|".join(_any_case(n) for n in self.names) + ")"
        entry = f" *(?:{name} *)?"
        pattern = f"^{entry}(?:,{entry})*$"
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "_regex", re.compile(pattern.removeprefix("^").removesuffix("$")))
        object.__setattr__(self, "_canonical", {n.lower(): n for n in self.names})

    def parse(self, values: list[str]) -> list[str]:
        """The canonical names the values ask for (none: no filter), or ``InvalidArgument``
        naming the first unknown one and the names there are."""
        names: list[str] = []
        for value in values:
            parts = [p.strip(" ") for p in value.split(",")]
            if not self._regex.fullmatch(value):
                unknown = next((p for p in parts if p and p.lower() not in self._canonical), value)
                raise InvalidArgument(
                    f"unknown {self.what} {unknown[:64]!r}; use one of {', '.join(self.names)} "
                    "(any case, comma-separated or repeated)"
                )
            names += [self._canonical[p.lower()] for p in parts if p]
        return names
