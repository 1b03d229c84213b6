"""A Python value the JSON encoder refuses, given as a step's arguments through the embedded
API, is refused naming the JSON policy's rule — as every other value outside the policy is —
not with the encoder's own words ("Out of range float values are not JSON compliant"). Both
stores."""

from __future__ import annotations

import math
from typing import Any

import pytest

import agenttx

cyclic: dict[str, Any] = {"key": "k"}
cyclic["value"] = cyclic

REFUSED = {
    "NaN": ({"key": "k", "value": math.nan}, "json_finite_numbers"),
    "infinity deep inside": ({"key": "k", "value": [{"x": [-math.inf]}]}, "json_finite_numbers"),
    "a set": ({"key": "k", "value": {1, 2}}, "json_type"),
    "an object": ({"key": "k", "value": object()}, "json_type"),
    "a value containing itself": (cyclic, "json_depth"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
async def test_an_unencodable_value_is_refused_naming_the_rule(
    engine: agenttx.Engine, name: str
) -> None:
    arguments, rule = REFUSED[name]
    tx = (await engine.begin(agent_id="embedded")).transaction_id
    with pytest.raises(agenttx.InvalidArgument, match=rf"\({rule}\)"):
        await engine.execute_step(tx, 1, "kv.put", arguments)
    # Nothing was journalled: the transaction still expects step 1.
    assert (await engine.get_transaction(tx)).next_step_id == 1
    ok = await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    assert ok.status is agenttx.StepStatus.SUCCESS
