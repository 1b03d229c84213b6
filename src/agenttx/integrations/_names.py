"""Tool names as model providers accept them, and back.

A provider takes function names matching ``^[a-zA-Z0-9_-]{1,64}$``; AgentTx tool names are any
1–128 bytes of UTF-8 and usually have dots (``kv.put``, ``files.write_file``). The mapping:

- letters, digits and ``_`` stand for themselves, so ``write_file`` stays ``write_file``;
- ``.`` becomes ``--`` (``kv.put`` → ``kv--put``);
- every other character, ``-`` included, becomes ``-<hex code point>-`` (``-`` → ``-2d-``).

``-`` only ever starts an escape, so the mapping is a prefix code: it decodes one way, and two
names never meet (``provider_name`` is injective). A name whose mapping is longer than 64
characters keeps its first whole escapes up to 52 characters and ends in ``-_`` and ten hex
digits of the name's SHA-256; ``-_`` starts no escape, so such a name never equals a plain
one, and it decodes only through the table that made it (``ToolNames``). Two long names
sharing a hash would meet: ``ToolNames`` refuses that when the tools are wrapped, never later.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from agenttx.errors import InvalidArgument

__all__ = ["PROVIDER_NAME", "NameCollision", "ToolNames", "provider_name", "tool_name"]

PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_PROVIDER_NAME = 64
_KEPT_PREFIX = 52  # 64 - len("-_") - 10 hex digits of the hash
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_HEX = frozenset("0123456789abcdef")


def _escape(ch: str) -> str:
    if ch in _PLAIN:
        return ch
    if ch == ".":
        return "--"
    return f"-{ord(ch):x}-"


def provider_name(tool: str) -> str:
    """The name a provider accepts for the AgentTx tool ``tool``."""
    if not tool:
        raise InvalidArgument("a tool name cannot be empty")
    tokens = [_escape(ch) for ch in tool]
    whole = "".join(tokens)
    if len(whole) <= MAX_PROVIDER_NAME:
        return whole
    kept, size = [], 0
    for token in tokens:  # whole escapes only, so the prefix never ends inside one
        if size + len(token) > _KEPT_PREFIX:
            break
        kept.append(token)
        size += len(token)
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return "".join(kept) + "-_" + digest


def tool_name(provider: str) -> str | None:
    """The AgentTx tool ``provider`` stands for, or None when no tool's plain mapping gives
    it (a shortened name, which only its ``ToolNames`` table knows, or a foreign one)."""
    if not PROVIDER_NAME.match(provider):
        return None
    out: list[str] = []
    i, end = 0, len(provider)
    while i < end:
        ch = provider[i]
        if ch != "-":
            out.append(ch)
            i += 1
            continue
        if i + 1 < end and provider[i + 1] == "-":
            out.append(".")
            i += 2
            continue
        j = i + 1
        while j < end and provider[j] in _HEX:
            j += 1
        if j == i + 1 or j == end or provider[j] != "-":
            return None
        digits = provider[i + 1 : j]
        point = int(digits, 16)
        # Only the one spelling provider_name makes: no leading zeros, a character it escapes.
        if point > 0x10FFFF or f"{point:x}" != digits:
            return None
        decoded = chr(point)
        if decoded in _PLAIN or decoded == "." or 0xD800 <= point <= 0xDFFF:
            return None
        out.append(decoded)
        i = j + 1
    return "".join(out)


class NameCollision(InvalidArgument):
    """Two tools would reach the model under one name."""

    reason = "TOOL_NAME_COLLISION"


class ToolNames:
    """Both ways between AgentTx tool names and provider names, for one set of tools.

    Built once when the tools are wrapped; a provider name two of them would share is refused
    there (``NameCollision``), so a model's call always names exactly one tool."""

    def __init__(self, tools: Iterable[str] = ()) -> None:
        self._provider: dict[str, str] = {}  # AgentTx name -> provider name
        self._tool: dict[str, str] = {}  # provider name -> AgentTx name
        for tool in tools:
            self.add(tool)

    def add(self, tool: str, provider: str | None = None) -> str:
        """Name ``tool`` for the model as ``provider`` (default: ``provider_name(tool)``)."""
        given = provider if provider is not None else provider_name(tool)
        if not PROVIDER_NAME.match(given):
            raise InvalidArgument(
                f"{given!r} cannot be a tool name for a model: it must match "
                f"{PROVIDER_NAME.pattern}"
            )
        taken = self._tool.get(given)
        if taken is not None and taken != tool:
            raise NameCollision(
                f"tools {taken!r} and {tool!r} would both reach the model as {given!r}; "
                "rename one of them"
            )
        known = self._provider.get(tool)
        if known is not None and known != given:
            raise NameCollision(f"tool {tool!r} is named both {known!r} and {given!r}")
        self._provider[tool] = given
        self._tool[given] = tool
        return given

    def provider(self, tool: str) -> str:
        return self._provider[tool]

    def named(self, tool: str) -> bool:
        """True iff the AgentTx tool ``tool`` has a provider name in this table."""
        return tool in self._provider

    def tool(self, provider: str) -> str:
        """The AgentTx tool behind ``provider``; ``InvalidArgument`` naming the known ones."""
        found = self._tool.get(provider)
        if found is None:
            known = ", ".join(sorted(self._tool)) or "none"
            raise InvalidArgument(f"no tool is named {provider!r} here; the tools are: {known}")
        return found

    def __contains__(self, provider: object) -> bool:
        return provider in self._tool

    def __len__(self) -> int:
        return len(self._tool)
