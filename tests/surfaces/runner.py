"""How a conformance case runs on a surface: its calls made in order through the surface's
driver, each reply binding the placeholders the calls after it use, and the last call's
outcome compared with the table's and with the embedded engine's; then what the case says of
the surface's own form (its words, its continuation, its status)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from audit_helpers import run_sql
from compensation_tools import undone
from leaky_tools import SECRET
from surfaces.cases import BEHIND_THE_ENGINE, LACKS, SURFACES, Call, Case, expected_on
from surfaces.drivers import Driver, Outcome

# What a call's reply binds for the calls after it: placeholder → the reply's field.
BINDS = {
    "begin": (("tx", "transaction_id"),),
    "preview_commit": (("receipt", "receipt_id"), ("change", "change_hash")),
    "compensate": (("compensation", "transaction_id"),),
    "list_effects": (("effect", "effects[].effect_id"),),
}


def filled(value: Any, bound: dict[str, Any]) -> Any:
    """``value`` with each placeholder (``$tx``, …) replaced by what the case bound to it."""
    if isinstance(value, str) and value.startswith("$"):
        return bound[value[1:]]
    if isinstance(value, dict):
        return {k: filled(v, bound) for k, v in value.items()}
    if isinstance(value, list):
        return [filled(v, bound) for v in value]
    return value


async def run(case: Case, driver: Driver, scratch: Path) -> dict[str, Any]:
    """Make the case's calls through ``driver``: the last one's outcome, as the table says
    it (``Case.expected``), after its own form is checked. Every set-up call must succeed."""
    view, outcome, bound = await made(case, driver, scratch)
    in_its_own_form(case, driver.name, outcome, bound)
    return view


async def made(
    case: Case, driver: Driver, scratch: Path
) -> tuple[dict[str, Any], Outcome, dict[str, Any]]:
    """The last call's outcome as the table says it, as the surface gave it, and the
    placeholders the case bound."""
    bound = await prepared(case.setup, driver, scratch)
    outcome = await made_one(case.call, driver, bound)
    view = outcome.view(case.fields)
    if case.undone is not None:  # the undos run are the engine's, whichever surface asked
        view["undone"] = [list(u) for u in undone(bound["log"])]
    return scrubbed(view, bound), outcome, bound


async def prepared(setup: tuple[Call, ...], driver: Driver, scratch: Path) -> dict[str, Any]:
    """Make the set-up calls through ``driver`` in the fresh directory ``scratch``: what they
    bound (``$tx``, ``$log``, …). Each must succeed, but one the table lets a surface refuse."""
    scratch.mkdir()
    (scratch / "provider").write_text("happened")
    bound: dict[str, Any] = {"log": str(scratch / "undone.jsonl"), "dir": str(scratch)}
    # A file of the run's own in the engine's sandbox: the served surfaces share one.
    bound["file"] = f"{uuid.uuid4().hex}.txt"
    for c in setup:
        outcome = await made_one(c, driver, bound)
        assert outcome.ok or c.anyhow, (driver.name, c, outcome)
    return bound


async def made_one(c: Call, driver: Driver, bound: dict[str, Any]) -> Outcome:
    """The call ``c`` made through ``driver``, its reply binding what ``BINDS`` says; or,
    for ``behind_the_engine``, its SQL run on the store behind the surface's engine."""
    if c.operation == BEHIND_THE_ENGINE:
        inputs = filled(c.inputs, bound)
        await asyncio.to_thread(run_sql, driver.store_url, inputs["sql"], tuple(inputs["params"]))
        return Outcome(True)
    outcome = await driver.call(c.operation, **filled(c.inputs, bound))
    for name, path in BINDS.get(c.operation, ()) if outcome.ok else ():
        value = outcome.view((path,))["fields"][path]
        bound[name] = value[0] if isinstance(value, list) else value
    return outcome


# Each surface's words for its calls, for ``Case.own_call``: the step's call it names, and
# what another surface's calls look like in a text (every surface's names, and the engine's).
OWN_STEP = {
    "mcp": "run_step",
    "http": "POST /v1/transactions/",
    "cli": "agenttx tx step",
    "grpc": "ExecuteStep",
}
FOREIGN = {
    "mcp": ("run_step", "redo_step", "begin_transaction"),
    "http": ("POST /v1", "GET /v1"),
    "cli": ("agenttx tx",),
    "grpc": ("ExecuteStep", "RedoStep", "BeginTransaction"),
    "python": ("execute_step",),
}


def in_its_own_form(case: Case, surface: str, outcome: Outcome, bound: dict[str, Any]) -> None:
    """What ``case`` says the last call looks like on ``surface``: its words, its
    continuation's fields, its own status, that it names its own call; and, on every surface,
    that no reply holds a traceback or a credential."""
    said = scrubbed(outcome.text, bound)
    assert "Traceback" not in said, (surface, said)
    assert SECRET not in said, (surface, said)  # a credential a tool's error quoted: masked
    for words in case.on(surface, case.says):
        for word in words:
            assert word in said, (surface, word, said)
    then = scrubbed(dict(outcome.next), bound)
    for fields in case.on(surface, case.next):
        for name, want in fields.items():
            if isinstance(want, tuple):  # words its text holds
                for word in want:
                    assert word in str(then.get(name, "")), (surface, name, word, then)
            else:
                assert then.get(name) == want, (surface, name, then)
    if outcome.details is not None:
        given = scrubbed(dict(outcome.details), bound)
        assert {k: given.get(k) for k in case.details} == case.details, (surface, given)
    for fields in case.on(surface, case.only):
        given = scrubbed(outcome.view(tuple(fields))["fields"], bound)
        assert given == fields, (surface, given)
    for code in case.on(surface, case.codes):
        assert outcome.code == code, (surface, outcome.code, said)
    family = surface.split("-")[0]
    if case.own_call and family in OWN_STEP:
        instruction = str(then.get("instruction", ""))
        assert OWN_STEP[family] in instruction, (surface, instruction)
        for other, words in FOREIGN.items():
            for word in words if other != family else ():
                assert word not in instruction, (surface, word, instruction)
                assert word not in outcome.message, (surface, word, outcome.message)
        if family == "grpc":  # the status's message names no call: the metadata does
            assert not any(w in outcome.message for w in FOREIGN["grpc"]), outcome.message


def scrubbed(value: Any, bound: dict[str, Any]) -> Any:
    """``value`` with each id the case bound (a transaction's, a receipt's) written as its
    placeholder inside texts, so a text that names the transaction compares across runs."""
    if isinstance(value, str):
        for name in ("compensation", "receipt", "change", "tx", "file"):
            if isinstance(bound.get(name), str):
                value = value.replace(bound[name], "$" + name)
        return value
    if isinstance(value, dict):
        return {k: scrubbed(v, bound) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed(v, bound) for v in value]
    return value


def params(cases: tuple[Case, ...]) -> list[Any]:
    """(case, surface) for every case on every surface that offers its operations."""
    out = []
    for case in cases:
        for surface in SURFACES:
            if any((surface, c.operation) in LACKS for c in (*case.setup, case.call)):
                continue  # test_a_surface_lacks_what_the_table_says checks it is absent
            out.append(pytest.param(case, surface, id=f"{case.id}-{surface}"))
    return out


_embedded: dict[str, dict[str, Any]] = {}  # case id → the engine's outcome, run once


async def same_as_the_engine(
    case: Case, surface: str, drivers: dict[str, Driver], scratch: Path
) -> None:
    """The engine gives the table's outcome, and ``surface`` the engine's (or its documented
    difference, ``DIFFERS``)."""
    if case.id not in _embedded:
        _embedded[case.id] = await run(case, drivers["embedded"], scratch / "embedded")
    engine = _embedded[case.id]
    assert engine == case.expected, f"the engine itself disagrees with the table: {engine}"
    if surface != "embedded":
        want = expected_on(case, surface, engine)
        got = await run(case, drivers[surface], scratch / surface)
        assert got == want, f"{surface} gave {got}, not {want}"


def conformance_test(cases: tuple[Case, ...]) -> Callable[..., Awaitable[None]]:
    """The test of ``cases`` on every surface, for a module to collect under its name."""

    @pytest.mark.parametrize(("case", "surface"), params(cases))
    async def test(case: Case, surface: str, drivers: dict[str, Driver], tmp_path: Path) -> None:
        await same_as_the_engine(case, surface, drivers, tmp_path)

    return test
