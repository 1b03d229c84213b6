"""The lifecycle and the approval of a commit (``cases.LIFECYCLE``) on every surface: the same
calls with the same inputs give the outcome the table says — the reason code of a refusal, the
reply's status, revision and snapshot fields — and the one the embedded engine gives."""

from __future__ import annotations

import pytest

from surfaces.cases import LIFECYCLE
from surfaces.runner import conformance_test

pytestmark = pytest.mark.asyncio(loop_scope="module")

test_each_surface_gives_the_engines_outcome = conformance_test(LIFECYCLE)
