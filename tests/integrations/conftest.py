"""The framework suites' shared checks (``scenarios``) assert as the tests do: registered for
pytest's assert rewriting before any test module imports them, so a failing check shows its
values. The shared fixtures are in ``framework_service`` (a plugin each suite names)."""

import pytest

pytest.register_assert_rewrite("scenarios")
