"""Where the tests and the repository are, for tests in any layer folder (tests/<layer>/)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # the support modules and workers live here
ROOT = TESTS.parent
