"""The tool contract: a named function with a validated JSON input and a declared effect class.

``@tool`` turns a function ``(ctx, **arguments)`` into a ``Tool``. The input schema comes from
the type hints of the arguments after ``ctx`` (a pydantic model), so arguments are validated
before the function runs and ``list_tools`` can show the schema; the output schema comes from
the return annotation the same way (no annotation, or one pydantic cannot describe: ``{}``,
"any JSON"), and is only shown, never enforced. A tool of effect class
``compensatable`` declares how it is undone with ``@my_tool.undo``; the undo handler is looked
up by name, so an undo recorded before a crash still runs after a restart. An undo runs under
``undo_timeout`` (default: the tool's ``timeout``); one that times out or raises
``UncertainOutcome`` has an unknown outcome, settled by ``@my_tool.undo_reconcile`` or an
operator, never by running it again (``docs/compensation.md``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import (
    Any,
    Literal,
    NotRequired,
    Required,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
    overload,
)

import typing_extensions
from pydantic import (
    BaseModel,
    ConfigDict,
    PydanticUserError,
    TypeAdapter,
    ValidationError,
    create_model,
)

# ArgumentError is defined in the one error tree; re-exported here, where callers find it.
from agenttx.errors import ArgumentError as ArgumentError
from agenttx.errors import InvalidArgument
from agenttx.jsontext import compact
from agenttx.settings import SETTINGS
from agenttx.tools.argument_errors import describe_validation_errors, unexpected_argument
from agenttx.types import EffectClass

Compensation = Literal["not_required", "supported", "best_effort", "rollback_not_supported"]
COMPENSATION_CONTRACTS: tuple[str, ...] = get_args(Compensation)
MAX_COMPENSATION_WINDOW_S = 366 * 86_400.0  # a year: a window past it is a typo
# The dry-run fidelity a tool declares (``agenttx.types.Fidelity``, ``docs/dry-run.md``), or
# one of the two labels used before the four levels, still read (``LEGACY_FIDELITY``).
DryRunFidelity = Literal[
    "schema_only",
    "policy_and_schema",
    "downstream_validation",
    "full_simulation",
    "validated",
    "read_only_preview",
]
# The old labels and the level each now means: ``validated`` ran a validation,
# ``read_only_preview`` showed what would happen without doing it.
LEGACY_FIDELITY = {"validated": "downstream_validation", "read_only_preview": "full_simulation"}

MAX_TOOL_NAME_BYTES = 128
# A tool that sets no timeout runs under the engine's ``step_timeout_s`` (this is its default).
DEFAULT_TIMEOUT_S: float = SETTINGS["step_timeout_s"].default
MAX_TIMEOUT_S = 86_400.0  # a tool's timeout and its undo's: a day at most


@dataclass(eq=False)
class Tool:
    name: str
    fn: Callable[..., Any]
    effect: EffectClass
    description: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    idempotent: bool = False
    compensation: Compensation = "not_required"
    # How long after its undo was recorded the undo may still run (None: no limit before the
    # commit; after it, the engine's default keep). Past it the undo is not run and the
    # transaction needs a human (``docs/compensation.md``).
    compensation_window_s: float | None = None
    # True iff running this tool's undo (in a rollback or a compensation) needs an approver.
    compensation_approval: bool = False
    # True iff a transaction with a step of this tool commits only with the receipt of a
    # current preview (no approver needed): the plan is seen before it takes effect (seed 002,
    # ``requires_plan_before_commit``; docs/safety.md).
    requires_plan_before_commit: bool = False
    dry_run: DryRunFidelity = "schema_only"
    examples: list[dict[str, Any]] = field(default_factory=list)
    extra_arguments: Literal["forbid", "ignore"] = "forbid"
    # True iff the tool only uses managed state (no outside I/O, no sleeps): it cannot hang,
    # so the engine runs it without arming a timeout timer. Built-in state tools only.
    bounded: bool = False
    # How long one run of the undo handler may take (None: ``timeout_s``). Past it the undo's
    # outcome is unknown: it is never run again blindly (``docs/compensation.md``).
    undo_timeout_s: float | None = None
    undo_fn: Callable[..., Any] | None = None
    reconcile_fn: Callable[..., Any] | None = None
    # Asks the outside system whether an undo whose outcome is unknown took effect; called
    # as the undo handler is, ``fn(ctx, **undo_args)``, with a ``ReconcileContext``.
    undo_reconcile_fn: Callable[..., Any] | None = None
    # Dry-run handlers, called like ``fn`` (``docs/dry-run.md``): ``validate_fn`` asks the
    # outside system whether the call would be accepted (raises if not); ``simulate_fn``
    # returns what the call would return, changing nothing.
    validate_fn: Callable[..., Any] | None = None
    simulate_fn: Callable[..., Any] | None = None
    input_model: type[BaseModel] | None = None
    # A tool given ``schema`` receives the raw argument object as ``fn(ctx, arguments)`` and
    # validates it itself (the built-ins do, to keep the reference's exact error wording);
    # ``schema`` is then only what list_tools shows.
    schema: dict[str, Any] | None = None
    takes_context: bool = True
    is_async: bool = True
    # The output schema to show when the function's return annotation cannot say it (a tool
    # forwarding to another MCP server shows that server's ``outputSchema``); None: derived.
    declared_output_schema: dict[str, Any] | None = None
    # The downstream MCP server this tool forwards to (the gateway); "" for local tools.
    server: str = ""

    def __post_init__(self) -> None:
        check_tool_name(self.name)
        self.dry_run = check_fidelity(self.name, self.dry_run)
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise InvalidArgument(f"tool {self.name}: timeout must be in (0, 86400] s")
        if self.undo_timeout_s is not None and not 0 < self.undo_timeout_s <= MAX_TIMEOUT_S:
            raise InvalidArgument(
                f"tool {self.name}: undo_timeout must be in (0, {MAX_TIMEOUT_S:g}] s, got "
                f"{self.undo_timeout_s!r}"
            )
        self.is_async = inspect.iscoroutinefunction(self.fn)
        if self.schema is None:
            self.input_model, self.takes_context = _input_model(
                self.name, self.fn, self.extra_arguments
            )
        if self.compensation not in COMPENSATION_CONTRACTS:
            allowed = ", ".join(COMPENSATION_CONTRACTS)
            raise InvalidArgument(
                f"tool {self.name}: unknown compensation {self.compensation!r}; use one of "
                f"{allowed}"
            )
        window = self.compensation_window_s
        if window is not None and not 0 < window <= MAX_COMPENSATION_WINDOW_S:
            raise InvalidArgument(
                f"tool {self.name}: compensation_window_s must be in "
                f"(0, {MAX_COMPENSATION_WINDOW_S:g}] s, got {window!r}"
            )
        if self.effect is EffectClass.COMPENSATABLE and self.compensation == "not_required":
            self.compensation = "supported"
        # The argument names a schema tool declares, when its schema refuses others
        # (``additionalProperties: false``; None: it takes any object). The built-ins say so,
        # and refuse unknown arguments as user tools do: a misspelled optional argument
        # (`kv.put` with `ttl`) is a mistake the agent should hear about.
        self.declared_arguments: frozenset[str] | None = _declared(
            self.schema, self.extra_arguments
        )

    @property
    def undo_name(self) -> str:
        return f"{self.name}#undo"

    @property
    def input_schema(self) -> dict[str, Any]:
        if self.schema is not None:
            return self.schema
        assert self.input_model is not None
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        return schema

    @functools.cached_property
    def output_schema(self) -> dict[str, Any]:
        """JSON schema of what the tool returns, from its return annotation."""
        if self.declared_output_schema is not None:
            return self.declared_output_schema
        return output_schema(self.fn)

    def undo(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the compensation for this tool, called as ``fn(ctx, **undo_args)``."""
        self.undo_fn = fn
        return fn

    def reconcile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: asks the outside system whether an uncertain call happened."""
        self.reconcile_fn = fn
        return fn

    def undo_reconcile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: asks the outside system whether an undo whose outcome is unknown (it
        timed out or raised ``UncertainOutcome``) took effect; called as ``fn(ctx,
        **undo_args)`` with a ``ReconcileContext`` (``undo_id`` set), it answers as a
        ``@tool.reconcile`` handler does: ``happened`` meaning the undo took effect."""
        self.undo_reconcile_fn = fn
        return fn

    @property
    def undo_timeout(self) -> float:
        """The bound on one run of this tool's undo handler, in seconds."""
        return self.undo_timeout_s if self.undo_timeout_s is not None else self.timeout_s

    @property
    def dry_run_reach(self) -> str:
        """The fidelity a dry run of this tool reaches, given the handlers it has: the declared
        level, or the highest below it whose handler exists (``core/dryrun.py``)."""
        level = self.dry_run
        if level == "full_simulation":
            context_only = self.effect in (EffectClass.READ, EffectClass.STATE, EffectClass.STAGED)
            if self.simulate_fn is not None or context_only:
                return level
            level = "downstream_validation"
        if level == "downstream_validation" and self.validate_fn is None:
            return "policy_and_schema"
        return level

    @property
    def undoable(self) -> bool:
        """True iff ``undo_step`` may undo a step of this tool (``core/revisions.py``)."""
        return (
            self.effect is not EffectClass.IRREVERSIBLE
            and self.compensation != "rollback_not_supported"
        )

    def simulate(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the dry-run simulation (``full_simulation``), called as the tool is; it
        returns what the tool would return and changes nothing outside."""
        self.simulate_fn = fn
        return fn

    @overload
    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]: ...
    @overload
    def validate(self, arguments: Callable[..., Any]) -> Callable[..., Any]: ...

    def validate(self, arguments: Any) -> Any:
        """Two uses, told apart by the argument. Given the arguments (a mapping): the validated
        arguments, coerced as the schema says; raises ``ArgumentError``. Given a function, as a
        decorator (``@my_tool.validate``): the dry-run validation (``downstream_validation``),
        called as the tool is; it raises if the outside system would refuse the call."""
        if callable(arguments) and not isinstance(arguments, Mapping):
            self.validate_fn = arguments
            return arguments
        if self.input_model is None:
            self.refuse_unknown(arguments)
            return dict(arguments)
        try:
            model = self.input_model.model_validate(arguments)
        except ValidationError as exc:
            raise ArgumentError(self._explain(exc)) from None
        return {k: getattr(model, k) for k in type(model).model_fields}

    def refuse_unknown(self, arguments: Any) -> None:
        """For a tool given ``schema``: raise ``ArgumentError`` naming the first argument the
        schema does not declare (a non-object is left to the tool, which reports it)."""
        declared = self.declared_arguments
        if declared is None or not isinstance(arguments, dict):
            return
        for name in arguments:
            if name not in declared:
                accepted = list(self.input_schema.get("properties", {}))
                raise ArgumentError(unexpected_argument(self.name, str(name), accepted))

    def _explain(self, exc: ValidationError) -> str:
        schema = self.input_schema
        properties: dict[str, Any] = schema.get("properties", {})
        types = {name: _json_type_name(prop) for name, prop in properties.items()}
        return describe_validation_errors(
            self.name, exc.errors(include_url=False), list(properties), types
        )

    def describe(self) -> dict[str, Any]:
        described = {
            "name": self.name,
            "description": self.description,
            "effect": self.effect.value,
            "timeout_s": self.timeout_s,
            "idempotent": self.idempotent,
            "compensation": self.compensation,
            "compensation_window_s": self.compensation_window_s,
            "compensation_approval": self.compensation_approval,
            "requires_plan_before_commit": self.requires_plan_before_commit,
            "dry_run": self.dry_run,
            "dry_run_reached": self.dry_run_reach,
            "undoable": self.undoable,
            "reconcilable": self.reconcile_fn is not None,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "examples": self.examples,
        }
        if self.server:
            described["server"] = self.server
        return described

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.fn(*args, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result


def _declared(schema: dict[str, Any] | None, extra: str) -> frozenset[str] | None:
    # JSON Schema's rule: only ``additionalProperties: false`` forbids other names (a schema
    # that says nothing allows them, as a tool wrapping another server's schema expects).
    if schema is None or extra != "forbid" or schema.get("additionalProperties") is not False:
        return None
    properties = schema.get("properties")
    return frozenset(properties) if isinstance(properties, dict) else None


def _json_type_name(prop: Any) -> str:
    # "integer", "string or null", "array" — what a missing argument should have been.
    if not isinstance(prop, dict):
        return ""
    if isinstance(prop.get("type"), str):
        return str(prop["type"])
    options = prop.get("anyOf") or prop.get("oneOf") or ()
    names = [str(o["type"]) for o in options if isinstance(o, dict) and "type" in o]
    return " or ".join(names)


def check_fidelity(name: str, declared: str) -> DryRunFidelity:
    """The declared dry-run fidelity as one of the four levels (an old label is mapped)."""
    level = LEGACY_FIDELITY.get(declared, declared)
    allowed = ("schema_only", "policy_and_schema", "downstream_validation", "full_simulation")
    if level not in allowed:
        raise InvalidArgument(
            f"tool {name}: unknown dry_run fidelity {declared!r}; use one of {', '.join(allowed)}"
        )
    return level  # type: ignore[return-value]  # one of ``allowed``


def check_tool_name(name: str) -> None:
    size = len(name.encode())
    if not 1 <= size <= MAX_TOOL_NAME_BYTES:
        raise InvalidArgument(f"tool name must be 1-{MAX_TOOL_NAME_BYTES} bytes, got {size}")


def tool(
    name: str | None = None,
    *,
    effect: EffectClass | str = EffectClass.READ,
    description: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    undo_timeout: float | None = None,
    idempotent: bool = False,
    compensation: Compensation = "not_required",
    compensation_window_s: float | None = None,
    compensation_approval: bool = False,
    requires_plan_before_commit: bool = False,
    dry_run: DryRunFidelity = "schema_only",
    examples: list[dict[str, Any]] | None = None,
    extra_arguments: Literal["forbid", "ignore"] = "forbid",
    schema: dict[str, Any] | None = None,
    bounded: bool = False,
) -> Callable[[Callable[..., Any]], Tool]:
    """Declare a tool: ``@agenttx.tool(name="crm.create_contact", effect="compensatable")``."""
    try:
        effect_class = EffectClass(effect)
    except ValueError:
        allowed = ", ".join(e.value for e in EffectClass)
        raise InvalidArgument(f"unknown effect class {effect!r}; use one of {allowed}") from None

    def wrap(fn: Callable[..., Any]) -> Tool:
        doc = inspect.getdoc(fn) or ""
        return Tool(
            name=name or fn.__name__,
            fn=fn,
            effect=effect_class,
            description=description if description is not None else doc.split("\n\n")[0],
            timeout_s=timeout,
            undo_timeout_s=undo_timeout,
            idempotent=idempotent,
            compensation=compensation,
            compensation_window_s=compensation_window_s,
            compensation_approval=compensation_approval,
            requires_plan_before_commit=requires_plan_before_commit,
            dry_run=dry_run,
            examples=list(examples or []),
            extra_arguments=extra_arguments,
            schema=schema,
            bounded=bounded,
        )

    return wrap


def _input_model(name: str, fn: Callable[..., Any], extra: str) -> tuple[type[BaseModel], bool]:
    sig = inspect.signature(fn)
    try:
        hints = get_type_hints(fn, include_extras=True)  # keeps Annotated[int, Field(gt=0)]
    except Exception as exc:  # a forward reference that does not resolve
        raise InvalidArgument(f"tool {name}: cannot read type hints: {exc}") from exc
    params = list(sig.parameters.values())
    takes_context = bool(params) and (
        params[0].name in ("ctx", "context") or _is_context_type(hints.get(params[0].name))
    )
    if takes_context:
        params = params[1:]
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = hints.get(p.name, Any)
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (annotation, default)
    model_name = "".join(part.capitalize() for part in name.replace("-", ".").split(".")) + "Input"
    config = ConfigDict(extra="forbid" if extra == "forbid" else "ignore")
    return create_model(model_name, __config__=config, **fields), takes_context


def output_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema of ``fn``'s return annotation, as a tool's output would be serialised:
    ``-> None`` is ``{"type": "null"}``, ``-> str`` a string, a TypedDict or pydantic model an
    object with its fields. No annotation, ``Any``, or a type pydantic cannot describe is
    ``{}``: the output schema is documentation, so a tool that runs is never refused for it."""
    try:
        annotation = get_type_hints(fn).get("return", Any)
    except Exception:  # an unresolvable forward reference; the input schema reports it
        return {}
    if annotation is Any:
        return {}
    if is_typeddict(annotation):
        annotation = _portable_typeddict(annotation)
    try:
        schema = TypeAdapter(annotation).json_schema(mode="serialization")
    except (PydanticUserError, TypeError, ValueError):
        return {}
    schema.pop("title", None)
    return schema


def _portable_typeddict(typed: Any) -> Any:
    # pydantic on Python < 3.12 refuses ``typing.TypedDict``; the ``typing_extensions`` one
    # with the same keys (required ones required) has the same JSON schema. TypedDicts held
    # directly in its fields are converted too.
    # With ``from __future__ import annotations`` Python 3.11 cannot see ``NotRequired`` in
    # the string annotations when it builds ``__required_keys__``: the resolved hints can.
    hints = get_type_hints(typed, include_extras=True)
    fields: dict[str, Any] = {}
    for key, annotation in hints.items():
        required = key in typed.__required_keys__
        if get_origin(annotation) in (Required, NotRequired):
            required = get_origin(annotation) is Required
            annotation = get_args(annotation)[0]
        if is_typeddict(annotation):
            annotation = _portable_typeddict(annotation)
        fields[key] = Required[annotation] if required else NotRequired[annotation]
    return typing_extensions.TypedDict(typed.__name__, fields)  # type: ignore[operator]


def _is_context_type(annotation: Any) -> bool:
    return getattr(annotation, "__name__", "") in ("ToolContext", "SyncToolContext")


def to_json(value: Any) -> str:
    """Compact JSON the way outputs are stored; raises TypeError for non-JSON values."""
    return compact(value)
