"""Undo and redo, unknown outcomes, compensation, the audit chain and the outbox
(``cases.SAFETY``) on every surface, as ``test_lifecycle.py`` runs the lifecycle; and the
table's promises about itself: every operation of the service contract has a case, each
surface offers every operation but those ``LACKS`` names, and those it really lacks."""

from __future__ import annotations

import pytest

import agenttx
from surfaces.cases import CASES, LACKS, SAFETY
from surfaces.drivers import Driver
from surfaces.runner import conformance_test

pytestmark = pytest.mark.asyncio(loop_scope="module")

test_each_surface_gives_the_engines_outcome = conformance_test(SAFETY)


@pytest.mark.parametrize(("surface", "operation"), list(LACKS), ids=[f"{s}-{o}" for s, o in LACKS])
async def test_a_surface_lacks_what_the_table_says(
    surface: str, operation: str, drivers: dict[str, Driver]
) -> None:
    assert not await drivers[surface].offers(operation), LACKS[surface, operation]
    assert await drivers["embedded"].offers(operation)


async def test_the_table_covers_every_operation_of_the_contract(
    drivers: dict[str, Driver],
) -> None:
    operations = {name for name in vars(agenttx.TransactionService) if not name.startswith("_")}
    assert operations <= {case.call.operation for case in CASES}
    for surface, driver in drivers.items():
        for operation in sorted(operations):
            if (surface, operation) not in LACKS:
                assert await driver.offers(operation), (surface, operation)
