"""Hints for the errors agents meet: a tool's own argument mistakes say what the tool accepts
(with a did-you-mean), an unknown tool names the closest registered ones first, built-ins refuse
unknown arguments as user tools do, and LLM / API SDK errors get categories that tell the
controller whether to retry in place (transient) or not at all (a credential or quota)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import Field

import agenttx
from agent_hint_cases import AGENT_CASES, AgentCase
from agenttx import StepStatus
from agenttx.core.hints import (
    ARGUMENT_CATEGORIES,
    PERMANENT_CATEGORIES,
    TRANSIENT_CATEGORIES,
    Category,
    clean_hint,
    reference_category,
)
from agenttx.errors import ArgumentError
from agenttx.tools.builtin import BUILTIN_TOOLS
from agenttx.tools.registry import ToolRegistry


@pytest.mark.parametrize("case", AGENT_CASES, ids=lambda case: case.name)
def test_an_agent_error_becomes_its_rule_s_hint(case: AgentCase) -> None:
    hint = clean_hint(case.raw)
    assert (hint.rule, hint.category, hint.key) == (case.rule, case.category, case.key), hint
    assert hint.text.startswith("Hint: ")
    assert len(hint.text) <= 240
    assert "errors.pydantic.dev" not in hint.text
    assert "Traceback" not in hint.text
    for fragment in case.says:
        assert fragment in hint.text, hint.text


@pytest.mark.parametrize(
    "case",
    [c for c in AGENT_CASES if c.category in ("timeout", "rate_limited", "server_error")],
    ids=lambda case: case.name,
)
def test_overloads_rate_limits_and_timeouts_are_retried_in_place(case: AgentCase) -> None:
    hint = clean_hint(case.raw)
    assert hint.transient
    assert "retry the same step" in hint.text


@pytest.mark.parametrize(
    "case",
    [c for c in AGENT_CASES if c.category in ("http_auth", "quota_exhausted")],
    ids=lambda case: case.name,
)
def test_a_bad_credential_or_quota_is_not_retried_and_names_what_to_fix(case: AgentCase) -> None:
    hint = clean_hint(case.raw)
    assert hint.category in PERMANENT_CATEGORIES
    assert not hint.transient
    assert hint.category not in ARGUMENT_CATEGORIES
    assert "will not help" in hint.text
    if hint.category == "http_auth":  # names the credential to set
        assert any(
            name in hint.text
            for name in (
                "ANTHROPIC_API_KEY",
                "OPENAI_API_KEY",
                "GOOGLE_API_KEY",
                "GOOGLE_APPLICATION_CREDENTIALS",
            )
        ), hint.text


def test_an_openai_key_in_the_error_is_not_repeated() -> None:
    raw = AGENT_CASES[[c.name for c in AGENT_CASES].index("openai 401")].raw
    assert "sk-proj" not in clean_hint(raw.replace("****", "AbCdEfGh12")).text


def test_the_new_categories_are_argument_errors_or_permanent_and_have_reference_names() -> None:
    assert {"unexpected_argument", "out_of_range"} <= ARGUMENT_CATEGORIES
    assert {"http_auth", "quota_exhausted"} == PERMANENT_CATEGORIES
    assert not PERMANENT_CATEGORIES & (TRANSIENT_CATEGORIES | ARGUMENT_CATEGORIES)
    assert reference_category(Category.UNEXPECTED_ARGUMENT) == "invalid_value"
    assert reference_category(Category.OUT_OF_RANGE) == "invalid_value"
    assert reference_category(Category.QUOTA_EXHAUSTED) == "rate_limited"


# --- user tools: what validation says ------------------------------------------------------


@agenttx.tool(name="crm.create_contact", effect="read")
def create_contact(email: str, name: str = "", age: int = 0) -> dict[str, Any]:
    return {"email": email, "name": name, "age": age}


@agenttx.tool(name="shop.order", effect="read")
def order(qty: Annotated[int, Field(gt=0)], size: Literal["s", "m"] = "s") -> None:
    return None


def _refusal(tool: agenttx.Tool, args: Any) -> str:
    with pytest.raises(ArgumentError) as caught:
        tool.validate(args)
    return str(caught.value)


def test_an_unexpected_argument_names_what_the_tool_accepts() -> None:
    assert _refusal(create_contact, {"email": "a@b", "phone": "1"}) == (
        "unexpected argument 'phone'; crm.create_contact accepts: email, name, age"
    )


def test_a_misspelled_argument_gets_a_did_you_mean() -> None:
    text = _refusal(create_contact, {"email": "a@b", "nmae": "Ada"})
    assert text.startswith("unexpected argument 'nmae'; did you mean 'name'?")
    hint = clean_hint(text)
    assert hint.category == "unexpected_argument"
    assert hint.key == "nmae"
    assert "did you mean 'name'?" in hint.text


def test_missing_mistyped_and_out_of_range_name_the_field_and_the_expected_type() -> None:
    missing = _refusal(create_contact, {"name": "Ada"})
    assert missing == (
        "missing argument 'email' (string); crm.create_contact accepts: email, name, age"
    )
    mistyped = _refusal(create_contact, {"email": "a@b", "age": "forty"})
    assert mistyped == (
        "argument 'age' of crm.create_contact has the wrong type: expected a valid integer, "
        "got string 'forty'"
    )
    low = _refusal(order, {"qty": 0})
    assert low == (
        "argument 'qty' of shop.order is out of range: expected greater than 0, got number 0"
    )
    choice = _refusal(order, {"qty": 1, "size": "xl"})
    assert "expected 's' or 'm', got string 'xl'" in choice
    for text, category in (
        (missing, "missing_argument"),
        (mistyped, "type_mismatch"),
        (low, "out_of_range"),
        (choice, "out_of_range"),
    ):
        hint = clean_hint(text)
        assert hint.category == category, hint
        assert "errors.pydantic.dev" not in hint.text


def test_not_an_object_and_many_problems_stay_one_short_line() -> None:
    assert _refusal(create_contact, ["a@b"]) == (
        "the arguments of crm.create_contact must be a JSON object, got an array of 1"
    )
    many = {f"extra_{i}": i for i in range(50)}
    text = _refusal(create_contact, many)
    assert text.count("unexpected argument") == 2  # and "missing argument" first, then more
    assert "more problems" in text
    assert len(text) < 600


def test_the_closest_tool_names_come_first() -> None:
    registry = ToolRegistry(BUILTIN_TOOLS)
    text = registry.unknown_tool_message("kv.putt")
    assert text.startswith("unknown tool 'kv.putt'; did you mean kv.put? registered tools: kv.put")
    assert registry.unknown_tool_message("zzz") == (
        "unknown tool 'zzz'; registered tools: " + ", ".join(registry.names())
    )


def test_a_big_registry_lists_twenty_names_and_still_finds_the_close_one() -> None:
    # More names than are compared (1 000): those of the namespace asked for come first.
    def noop(arguments: Any) -> None:
        return None

    tools = [
        agenttx.tool(name=f"ns{i // 100}.tool_{i}", schema={"type": "object"})(noop)
        for i in range(3000)
    ]
    text = ToolRegistry(tools).unknown_tool_message("ns24.tool_2417x")
    assert "did you mean ns24.tool_2417?" in text
    assert text.endswith("(2980 more)")


# --- through the engine ----------------------------------------------------------------------


async def _first_step(engine: agenttx.Engine, tool: str, args: Any) -> agenttx.StepResult:
    tx = (await engine.begin()).transaction_id
    return await engine.execute_step(tx, 1, tool, args)


async def test_built_in_tools_refuse_unknown_arguments_like_user_tools(
    engine: agenttx.Engine,
) -> None:
    r = await _first_step(engine, "kv.put", {"key": "a", "value": 1, "ttl": 60})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert r.error_category == "unexpected_argument"
    assert r.clean_hint == "Hint: unexpected argument 'ttl'; kv.put accepts: key, value."
    r = await _first_step(engine, "record.insert", {"table": "t", "id": "1", "feilds": {}})
    assert "did you mean 'fields'?" in r.clean_hint


def test_a_schema_tool_refuses_other_names_only_when_its_schema_says_so() -> None:
    def raw(arguments: Any) -> Any:
        return arguments

    props = {"type": "object", "properties": {"a": {}, "b": {}}}
    strict = agenttx.tool(name="t.strict", schema={**props, "additionalProperties": False})(raw)
    open_ = agenttx.tool(name="t.open", schema=props)(raw)
    assert _refusal(strict, {"a": 1, "c": 2}) == "unexpected argument 'c'; t.strict accepts: a, b"
    assert open_.validate({"a": 1, "c": 2}) == {"a": 1, "c": 2}
    for built_in in BUILTIN_TOOLS:
        assert built_in.input_schema["additionalProperties"] is False, built_in.name


async def test_an_unknown_tool_suggests_the_close_name(engine: agenttx.Engine) -> None:
    r = await _first_step(engine, "kv.putt", {"key": "a"})
    assert r.error_category == "unknown_tool"
    assert r.clean_hint.startswith("Hint: tool 'kv.putt' does not exist; did you mean kv.put?")


async def test_a_user_tool_typo_names_the_accepted_arguments(open_engine: Any) -> None:
    engine = await open_engine(tools=[create_contact])
    r = await _first_step(engine, "crm.create_contact", {"email": "a@b", "nmae": "Ada"})
    assert r.error_category == "unexpected_argument"
    assert r.clean_hint == (
        "Hint: unexpected argument 'nmae'; did you mean 'name'? "
        "crm.create_contact accepts: email, name, age."
    )


async def test_a_missing_key_of_the_producer_lists_the_keys_it_has(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    r = await engine.execute_step(tx, 2, "kv.put", {"key": "${steps.1.name}", "value": 2})
    assert r.error_category == "unresolved_reference"
    assert "(key, value)" in r.clean_hint
