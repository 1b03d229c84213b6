"""Agent frameworks' tool calls as AgentTx steps: one framework-neutral core, one module per
framework (``agenttx.integrations.langgraph`` …), each an extra of its own.

This package imports no framework: only a framework's module does, and it fails at once,
naming the extra to install, when the framework is missing. What every framework module
shares lives here, one idea per module:

- ``_transaction``: ``AgentTransaction``, one agent run as one transaction — begin, each call
  the next step (one at a time; a message's calls in the message's order), the owed-steps rule
  of the client helper, commit or rollback at the block's end, approval of the commit;
- ``_names``: AgentTx tool names to provider function names (``^[a-zA-Z0-9_-]{1,64}$``) and
  back, reversibly and without collisions;
- ``_failure``: what the model reads of a call that did not take effect, and the error the
  block raises when the agent finished owing steps;
- ``_order``: the calls of one model message let through in the message's order, for a
  framework that runs them as concurrent tasks;
- ``_catalog``: the tools a service has, in one shape for the engine and the client;
- ``_block``: ``TransactionBlock``, the ``tx`` of every framework's block (begin on entry, end
  on exit, what the caller reads), subclassed once per framework; ``preview_shown``, what an
  approval pause shows a person;
- ``_engine_tools``: ``engine_tools``, the engine side of every ``as_agenttx_tools`` — the
  default effect (irreversible), the effects a framework tool may have, the undo rules, the
  name checks — over tools described as ``FrameworkTool``s;
- ``_extras``: ``missing_extra``, the error of a framework module imported without its extra.

Every framework's ``transaction(service, **options)`` takes ``TransactionOptions`` (in
``_transaction``), the keywords of ``AgentTransaction``, declared once.

The layer: it may import the service contract, the plain types and errors, the tool contract
(to make ``agenttx.Tool``s of framework tools) and the client-side helpers; nothing in the
engine, the stores or the adapters imports it (the import rule in ``agenttx/__init__.py``).
"""

from agenttx.integrations._catalog import ToolSpec
from agenttx.integrations._failure import FailedCall, StepsOwed, constraints_prompt
from agenttx.integrations._names import (
    PROVIDER_NAME,
    NameCollision,
    ToolNames,
    provider_name,
    tool_name,
)
from agenttx.integrations._transaction import APPROVER, AgentTransaction, CallOutcome

__all__ = [
    "APPROVER",
    "PROVIDER_NAME",
    "AgentTransaction",
    "CallOutcome",
    "FailedCall",
    "NameCollision",
    "StepsOwed",
    "ToolNames",
    "ToolSpec",
    "constraints_prompt",
    "provider_name",
    "tool_name",
]
