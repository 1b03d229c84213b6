"""How a conformance case runs on a surface: its calls made in order through the surface's
driver, each reply binding the placeholders the calls after it use, and the last call's
outcome compared with the table's and with the embedded engine's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from surfaces.cases import LACKS, SURFACES, Call, Case, expected_on
from surfaces.drivers import Driver, Outcome

# What a call's reply binds for the calls after it: placeholder → the reply's field.
BINDS = {
    "begin": ("tx", "transaction_id"),
    "preview_commit": ("receipt", "receipt_id"),
    "compensate": ("compensation", "transaction_id"),
    "list_effects": ("effect", "effects[].effect_id"),
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
    it (``Case.expected``). Every set-up call must succeed."""
    scratch.mkdir()
    (scratch / "provider").write_text("happened")
    bound: dict[str, Any] = {"log": str(scratch / "undone.jsonl"), "dir": str(scratch)}

    async def make(c: Call) -> Outcome:
        outcome = await driver.call(c.operation, **filled(c.inputs, bound))
        if outcome.ok and c.operation in BINDS:
            name, path = BINDS[c.operation]
            value = outcome.view((path,))["fields"][path]
            bound[name] = value[0] if isinstance(value, list) else value
        return outcome

    for c in case.setup:
        outcome = await make(c)
        assert outcome.ok, (driver.name, c, outcome)
    return scrubbed((await make(case.call)).view(case.fields), bound)


def scrubbed(value: Any, bound: dict[str, Any]) -> Any:
    """``value`` with each id the case bound (a transaction's, a receipt's) written as its
    placeholder inside texts, so a text that names the transaction compares across runs."""
    if isinstance(value, str):
        for name in ("compensation", "receipt", "tx"):
            if isinstance(bound.get(name), str):
                value = value.replace(bound[name], "$" + name)
        return value
    if isinstance(value, dict):
        return {k: scrubbed(v, bound) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed(v, bound) for v in value]
    return value


def params(cases: tuple[Case, ...]) -> list[Any]:
    """(case, surface) for every case on every surface that offers its operation."""
    out = []
    for case in cases:
        for surface in SURFACES:
            if (surface, case.call.operation) in LACKS:
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
        assert await run(case, drivers[surface], scratch / surface) == want


def conformance_test(cases: tuple[Case, ...]) -> Callable[..., Awaitable[None]]:
    """The test of ``cases`` on every surface, for a module to collect under its name."""

    @pytest.mark.parametrize(("case", "surface"), params(cases))
    async def test(case: Case, surface: str, drivers: dict[str, Driver], tmp_path: Path) -> None:
        await same_as_the_engine(case, surface, drivers, tmp_path)

    return test
