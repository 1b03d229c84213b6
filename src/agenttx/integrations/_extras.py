"""The error a framework module raises when imported without its extra: it names the extra
to install, at import time, rather than failing later on a missing attribute.

Each framework module imports its framework inside ``try`` and, on ``ImportError``, raises
``missing_extra(__name__, …) from`` the original error, so the cause stays in the traceback.
"""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(module: str, needs: str, extra: str, cause: ImportError) -> ImportError:
    """The error for ``module`` (its ``__name__``), which needs ``needs`` ("pydantic-ai"),
    installed by the ``extra`` of agenttx ("pydantic-ai")."""
    return ImportError(
        f"{module} needs {needs}, which could not be imported ({cause}); install the extra "
        f"with: pip install 'agenttx[{extra}]'"
    )
