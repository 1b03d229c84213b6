"""``agenttx serve`` stopped short of serving, for the tests of its flags and variables.

Fixture (registered by ``pytest_plugins = ["serve_capture"]``): ``captured``, the list the
``ServeConfig`` each ``serve`` built is appended to instead of being served; no ``AGENTTX_*``
variable of the outer environment leaks in, and the ``agenttx`` logger ``serve`` configures is
put back afterwards.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from agenttx import server as server_module
from agenttx.server import ServeConfig


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ServeConfig]]:
    """``agenttx serve`` builds its config and stops short of serving."""
    configs: list[ServeConfig] = []
    monkeypatch.setattr(server_module, "run", configs.append)
    for name in list(os.environ):
        if name.startswith("AGENTTX_"):
            monkeypatch.delenv(name)
    logger = logging.getLogger("agenttx")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield configs
    logger.handlers[:], logger.level, logger.propagate = saved
