"""schemathesis against the running server's ``/openapi.json``: requests generated from the
document (valid and invalid ones) never get a 5xx, every reply conforms to the document, and
every error is in the one documented shape. Bounded for CI (``AGENTTX_SCHEMATHESIS_EXAMPLES``
raises it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from http_harness import http_base, start_http_server
from server_process import ServerProcess

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

EXAMPLES = int(os.environ.get("AGENTTX_SCHEMATHESIS_EXAMPLES", "25"))
CONTINUATIONS = {"CallTool", "ChooseTool", "RetryRequest", "ReviseRequest", "ResolveExternally"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_http_server(tmp_path_factory.mktemp("schemathesis") / "data")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


@pytest.fixture(scope="module")
def api_schema(server: ServerProcess) -> Any:
    loaded = schemathesis.openapi.from_url(http_base(server) + "/openapi.json")
    # The event streams never end while their transaction is open: test_http_api covers them.
    return loaded.exclude(path_regex="/events$")


def _check(case: Any) -> None:
    response = case.call(timeout=30)
    assert response.status_code < 500, (case.method, case.path, response.text[:500])
    if response.status_code >= 400:
        assert response.headers["content-type"][0].startswith("application/json")
        error = response.json()["error"]
        assert set(error) == {"code", "reason", "message", "details", "continuation"}
        assert error["continuation"]["kind"] in CONTINUATIONS
        assert error["message"]
    # Not "schema-valid data is accepted": the engine's limits are in UTF-8 bytes and some are
    # semantic (an unknown status, a lone surrogate), which JSON Schema cannot state, so a
    # schema-valid request may rightly get a 400. Every other check runs.
    case.validate_response(response, excluded_checks=[positive_data_acceptance])


# The operations are driven here with hypothesis directly: schemathesis' own pytest plugin
# does not run under this pytest (it reads a private attribute pytest 9 dropped).
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_generated_requests_get_no_5xx_and_documented_errors(api_schema: Any, mode: str) -> None:
    generation = schemathesis.GenerationMode(mode)
    operations = [r.ok() for r in api_schema.get_all_operations()]
    assert len(operations) >= 8
    unsatisfiable: list[str] = []
    for operation in operations:
        strategy = operation.as_strategy(generation_mode=generation)

        @given(case=strategy)
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case: Any) -> None:
            _check(case)

        try:
            run()
        except Unsatisfiable:
            # Nothing of this operation can be made invalid (GET /v1/tools takes no input).
            assert generation is schemathesis.GenerationMode.NEGATIVE
            unsatisfiable.append(operation.label)
    assert len(unsatisfiable) < len(operations) // 2, unsatisfiable
