"""Clean Hints: one short line an agent can act on, made from a tool's raw error.

A failed step's raw error (exception text and traceback, from any language, any size) becomes a
``Hint``: ``text`` (one line, at most ``max_len`` characters, starting ``"Hint: "``), the
``category`` the rollback controller decides on, the ``rule`` that matched and the ``key`` the
error names (the engine traces the root cause from it).

How: the input is capped (``MAX_INPUT_CHARS``: first quarter and last three quarters kept), stack
frame lines are removed, then an ordered rule table is tried, first match wins; a rule is data
(``hint_rules.toml`` in this package, plus the user's TOML files, which go first). Nothing
matched: the message of the last ``Caused by:``, else of the last exception-like line, else the
first line.

Invariants:
- ``HintCleaner.clean`` never raises, and its result always satisfies the ``text`` contract
  above, with secrets redacted (``redact``, from the bottom layer's ``agenttx.redaction``) and
  no stack frame in it.
- Pure and deterministic; a cleaner is immutable once built, so one instance serves all threads.
- Everything is compiled once, when the cleaner is built; a bad rule file fails there, as
  ``InvalidArgument`` naming the file, the rule and the problem.

The package, one module per idea:

    categories   Category, the sets the controller decides on, the reference's names
    templates    the template language a rule's hint text is written in
    rules        the TOML rule loader and the Rule values it makes
    cleaner      Hint, HintCleaner, clean_hint: the pipeline above
"""

from agenttx.core.hints.categories import (
    ARGUMENT_CATEGORIES,
    LITERAL_CATEGORIES,
    PERMANENT_CATEGORIES,
    REFERENCE_CATEGORIES,
    REFERENCE_CATEGORY,
    TRANSIENT_CATEGORIES,
    Category,
    reference_category,
)
from agenttx.core.hints.cleaner import (
    DEFAULT_MAX_LEN,
    MAX_INPUT_CHARS,
    Hint,
    HintCleaner,
    clean_hint,
)
from agenttx.core.hints.rules import Rule, RulePattern
from agenttx.redaction import redact

__all__ = [
    "ARGUMENT_CATEGORIES",
    "DEFAULT_MAX_LEN",
    "LITERAL_CATEGORIES",
    "MAX_INPUT_CHARS",
    "PERMANENT_CATEGORIES",
    "REFERENCE_CATEGORIES",
    "REFERENCE_CATEGORY",
    "TRANSIENT_CATEGORIES",
    "Category",
    "Hint",
    "HintCleaner",
    "Rule",
    "RulePattern",
    "clean_hint",
    "redact",
    "reference_category",
]
