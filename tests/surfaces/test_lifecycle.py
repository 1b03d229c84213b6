"""The lifecycle and the approval of a commit (``cases.LIFECYCLE``) on every surface: the same
calls with the same inputs give the outcome the table says — the reason code of a refusal, the
reply's status, revision and snapshot fields — and the one the embedded engine gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from surfaces.cases import LIFECYCLE, Case
from surfaces.drivers import Driver
from surfaces.runner import params, same_as_the_engine

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.mark.parametrize(("case", "surface"), params(LIFECYCLE))
async def test_each_surface_gives_the_engines_outcome(
    case: Case, surface: str, drivers: dict[str, Driver], tmp_path: Path
) -> None:
    await same_as_the_engine(case, surface, drivers, tmp_path)
