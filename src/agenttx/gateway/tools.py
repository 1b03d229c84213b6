"""A downstream MCP tool as an AgentTx tool ``<server>.<tool>``, with its effect class.

The class comes from the tool's annotations, missing ones read as the MCP specification's
defaults (not read-only, destructive, not idempotent, open-world); the gateway file's
override wins:

- ``readOnlyHint`` → ``read``: called at the step.
- an undo pair (configured, or the tool's ``_meta["io.agenttx/undo"]``) → ``compensatable``:
  the undo call is recorded durably before the call and runs newest-first on rollback.
- otherwise → ``staged``: the step records the call; the outbox dispatcher makes it after a
  durable commit (``channel``), once per idempotency key.
- ``irreversible`` (override only): called at the step, never undone.

A ``before`` call (compensatable tools) runs first and its output feeds the undo mapping as
``${before.…}``; if it fails, the step stages the call instead and its output says why.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from agenttx.errors import UncertainOutcome
from agenttx.gateway.config import (
    UNDO_ROOTS,
    CallSpec,
    Secrets,
    ServerSettings,
    ToolSettings,
    parse_call,
)
from agenttx.gateway.mapping import MappingError, apply_mapping, check_template, roots_used
from agenttx.gateway.session import CallLost, DownstreamError, DownstreamSession, NotConnected
from agenttx.jsontext import compact
from agenttx.tools.context import ToolContext
from agenttx.tools.contract import DEFAULT_TIMEOUT_S, MAX_TOOL_NAME_BYTES, Tool
from agenttx.types import STAGED_OUTPUT_KEY, EffectClass

log = logging.getLogger("agenttx.gateway")

UNDO_META_KEY = "io.agenttx/undo"  # the capability asked for in MCP specification issue #1357
CHANNEL = "mcp_gateway"  # the outbox channel of staged downstream calls
UNDO_HANDLER = "mcp_gateway#undo"  # one handler for every server: found by name after a restart

STAGED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The call is recorded; it runs once after commit. Its output exists only "
    "after commit.",
    "properties": {
        STAGED_OUTPUT_KEY: {"const": True},
        "tool": {"type": "string"},
        "runs": {"const": "after commit"},
        "idempotency_key": {"type": "string"},
        "reason": {"type": "string"},
    },
}


class DownstreamToolError(Exception):
    """The downstream tool answered ``isError``: its text is the step's raw error."""


@dataclass(frozen=True)
class Classified:
    effect: EffectClass
    idempotent: bool
    undo: CallSpec | None
    before: CallSpec | None
    source: str  # why: "override", "readOnlyHint", "undo (configured)", "undo (_meta)", "default"


def classify(tool: types.Tool, settings: ToolSettings | None) -> Classified:
    """The effect class of ``tool`` (raises ``ValueError`` for an unusable declaration)."""
    s = settings or ToolSettings()
    ann = tool.annotations
    read_only = bool(ann is not None and ann.read_only_hint)
    hinted_idempotent = bool(ann is not None and ann.idempotent_hint)
    idempotent = s.idempotent if s.idempotent is not None else (read_only or hinted_idempotent)
    undo, source = s.undo, "undo (configured)"
    if undo is None:
        declared = (tool.meta or {}).get(UNDO_META_KEY)
        if declared is not None:

            def fail(reason: str) -> ValueError:
                return ValueError(f"_meta[{UNDO_META_KEY!r}]: {reason}")

            undo, source = parse_call(declared, fail), "undo (_meta)"
            try:
                check_template(undo.arguments, UNDO_ROOTS)
            except MappingError as exc:
                raise fail(str(exc)) from None
    if s.effect is not None:
        effect = EffectClass(s.effect)
        if effect is EffectClass.COMPENSATABLE and undo is None:
            raise ValueError(
                "effect = 'compensatable' needs an undo: add undo = { tool, arguments }"
            )
        return Classified(
            effect,
            idempotent,
            undo if effect is EffectClass.COMPENSATABLE else None,
            s.before,
            "override",
        )
    if read_only:
        return Classified(EffectClass.READ, idempotent, None, None, "readOnlyHint")
    if undo is not None:
        return Classified(EffectClass.COMPENSATABLE, idempotent, undo, s.before, source)
    return Classified(EffectClass.STAGED, idempotent, None, None, "default")


def output_of(result: types.CallToolResult, secrets: Secrets) -> Any:
    """The step's output: the structured content when the tool gives one, else its text (and
    any other content blocks). ``isError`` raises ``DownstreamToolError`` with the text."""
    texts = [b.text for b in result.content if isinstance(b, types.TextContent)]
    if result.is_error:
        raise DownstreamToolError(secrets.redact("\n".join(texts) or "the tool reported an error"))
    if isinstance(result.structured_content, dict):
        return result.structured_content
    output: dict[str, Any] = {"text": "\n".join(texts)}
    others = [b for b in result.content if not isinstance(b, types.TextContent)]
    if others:
        output["content"] = [
            b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in others
        ]
    return output


def staged_output(name: str, key: str, reason: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {
        STAGED_OUTPUT_KEY: True,
        "tool": name,
        "runs": "after commit",
        "idempotency_key": key,
    }
    if reason:
        out["reason"] = reason
    return out


def staged_payload(
    server: str, tool: str, arguments: Any, idempotent: bool, timeout_ms: int | None
) -> dict[str, Any]:
    payload = {"server": server, "tool": tool, "arguments": arguments, "idempotent": idempotent}
    if timeout_ms is not None:
        payload["timeout_ms"] = timeout_ms  # the delivery's limit too (within the dispatcher's)
    return payload


class ForwardedTools:
    """Builds the AgentTx tools of one server's listing."""

    def __init__(self, session: DownstreamSession, secrets: Secrets) -> None:
        self.session = session
        self.settings: ServerSettings = session.settings
        self.secrets = secrets

    def build(self, listed: list[types.Tool]) -> list[Tool]:
        names = {t.name for t in listed}
        built: list[Tool] = []
        for tool in listed:
            if not self.settings.exposes(tool.name):
                continue
            try:
                built.append(self._tool(tool, names))
            except ValueError as exc:
                log.error(
                    "downstream %s: tool %s is not offered: %s",
                    self.settings.name,
                    tool.name,
                    self.secrets.redact(str(exc)),
                )
        return built

    def _tool(self, tool: types.Tool, names: set[str]) -> Tool:
        server = self.settings.name
        name = f"{server}.{tool.name}"
        if len(name.encode()) > MAX_TOOL_NAME_BYTES:
            raise ValueError(f"the name {name!r} is over {MAX_TOOL_NAME_BYTES} bytes")
        settings = self.settings.tools.get(tool.name)
        c = classify(tool, settings)
        log.debug("downstream %s: %s is %s (%s)", server, tool.name, c.effect.value, c.source)
        for call in (c.undo, c.before):
            if call is not None and call.tool not in names:
                raise ValueError(
                    f"{call.tool!r} (its undo or before call) is not a tool of {server}"
                )
        timeout_ms = settings.timeout_ms if settings is not None else None
        description = self.secrets.redact(tool.description or tool.title or "")
        undone_by = f"{server}.{c.undo.tool}" if c.undo is not None else ""
        note = {
            EffectClass.READ: "runs at the step",
            EffectClass.COMPENSATABLE: f"runs at the step; undone by {undone_by}",
            EffectClass.STAGED: "runs once after commit; its output exists only after commit",
            EffectClass.IRREVERSIBLE: "runs at the step and cannot be undone",
        }[c.effect]
        fn = self._function(tool.name, c, timeout_ms)
        return Tool(
            name=name,
            fn=fn,
            effect=c.effect,
            description=f"{description} [{server}: {note}]".strip(),
            timeout_s=timeout_ms / 1000 if timeout_ms is not None else DEFAULT_TIMEOUT_S,
            idempotent=c.idempotent,
            schema=self._redacted(object_schemas(tool.input_schema or {"type": "object"})),
            declared_output_schema=(
                STAGED_SCHEMA
                if c.effect is EffectClass.STAGED
                else self._redacted(object_schemas(tool.output_schema or {}))
            ),
            server=server,
        )

    def _redacted(self, schema: dict[str, Any]) -> dict[str, Any]:
        if not self.secrets:
            return schema
        redacted: dict[str, Any] = json.loads(self.secrets.redact(compact(schema)))
        return redacted

    # -------------------------------------------------------------- the calls

    def _function(self, tool: str, c: Classified, timeout_ms: int | None) -> Callable[..., Any]:
        server = self.settings.name
        name = f"{server}.{tool}"
        session = self.session
        secrets = self.secrets

        async def forward(ctx: ToolContext, arguments: Any) -> Any:
            async def relay(progress: float, total: float | None, message: str | None) -> None:
                await ctx.report_progress(progress, total, message)  # downstream → our caller

            try:
                result = await session.call(tool, _object(arguments), relay)
            except CallLost as exc:
                if c.effect is EffectClass.READ or c.idempotent:
                    raise ConnectionError(str(exc)) from None
                raise UncertainOutcome(str(exc)) from None
            except DownstreamError as exc:
                raise DownstreamToolError(str(exc)) from None
            return output_of(result, secrets)

        async def stage(ctx: ToolContext, arguments: Any, reason: str = "") -> Any:
            key = ctx.idempotency_key
            payload = staged_payload(server, tool, _object(arguments), c.idempotent, timeout_ms)
            ctx.stage_effect(CHANNEL, payload, key)
            return staged_output(name, key, reason)

        if c.effect is EffectClass.STAGED:
            return stage
        if c.effect is not EffectClass.COMPENSATABLE:
            return forward
        undo = c.undo
        assert undo is not None
        before = c.before
        needs_output = "output" in roots_used(undo.arguments)

        async def compensated(ctx: ToolContext, arguments: Any) -> Any:
            args = _object(arguments)
            sources: dict[str, Any] = {"args": args}
            if before is not None:
                try:
                    before_args = apply_mapping(before.arguments, sources)
                    sources["before"] = output_of(
                        await session.call(before.tool, _object(before_args)), secrets
                    )
                except (MappingError, DownstreamToolError, DownstreamError, ConnectionError) as exc:
                    reason = secrets.redact(f"before call {before.tool} failed: {exc}")[:500]
                    return await stage(ctx, arguments, reason + "; the call runs after commit")
            key = ctx.idempotency_key
            record: dict[str, Any] = {"server": server, "tool": undo.tool}
            if needs_output:
                # The undo needs the output: a guard is durable before the call, and the
                # resolved undo after it (newest first, it runs first and clears the guard).
                record |= {"guard": key}
            else:
                record |= {"arguments": apply_mapping(undo.arguments, sources), "call": key}
            await ctx.register_undo(record, handler=UNDO_HANDLER)
            try:
                output = await forward(ctx, arguments)
            except (DownstreamToolError, NotConnected):
                # The server answered that the call failed (or it was never sent): nothing
                # to undo. The step's rewind runs undo records newest first, so this one
                # voids the record above before it would run (a create that failed because
                # the thing existed must not delete it).
                await ctx.register_undo(
                    {"server": server, "tool": undo.tool, "voids": key}, handler=UNDO_HANDLER
                )
                raise
            if needs_output:
                resolved = apply_mapping(undo.arguments, {**sources, "output": output})
                await ctx.register_undo(
                    {
                        "server": server,
                        "tool": undo.tool,
                        "arguments": resolved,
                        "clears": ctx.idempotency_key,
                    },
                    handler=UNDO_HANDLER,
                )
            return output

        return compensated


# Where JSON Schema takes a subschema (a schema object or a boolean). The four keywords of
# ``_BOOLEAN_KEYWORDS`` keep a boolean: every client reads ``additionalProperties: false`` as the
# usual way to close an object, and the Inspector's portability check allows them alone.
_SUBSCHEMA = frozenset(
    {"items", "contains", "not", "propertyNames", "if", "then", "else", "contentSchema"}
    | {"additionalProperties", "unevaluatedProperties", "additionalItems", "unevaluatedItems"}
)
_BOOLEAN_KEYWORDS = frozenset(
    {"additionalProperties", "unevaluatedProperties", "additionalItems", "unevaluatedItems"}
)
_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SUBSCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "dependentSchemas", "dependencies", "$defs", "definitions"}
)


def object_schemas(schema: Any, keyword: str = "") -> Any:
    """``schema`` (a downstream tool's) with each boolean subschema written as the schema object
    it means: ``true`` → ``{}``, ``false`` → ``{"not": {}}`` — the same contract. A server built
    on a lenient SDK may send ``{"properties": {"x": true}}``; the TypeScript SDK refuses
    every such listing whole, and AgentTx re-exports these schemas (``list_tools``). Data
    keywords (``enum``, ``const``, ``default``, ``examples``) are left as they are. Linear in
    the schema; its depth is bounded by the JSON parser it came through."""
    if isinstance(schema, bool):
        if keyword in _BOOLEAN_KEYWORDS:
            return schema
        return {} if schema else {"not": {}}
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SUBSCHEMA_LISTS and isinstance(value, list):
            out[key] = [object_schemas(v) for v in value]
        elif key in _SUBSCHEMA:
            out[key] = object_schemas(value, key)
        elif key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            # ``dependencies`` maps a name to a schema or to a list of names (kept).
            out[key] = {
                n: v if isinstance(v, list) else object_schemas(v) for n, v in value.items()
            }
        else:
            out[key] = value
    return out


def _object(arguments: Any) -> dict[str, Any]:
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise TypeError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    return dict(arguments)
