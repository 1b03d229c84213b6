"""The engine: transactions of tool calls over a ``Store``, composed of named parts.

The map (concept → module):

=============================  ==============================================================
``Engine``                     ``engine``: the public operations and the parts (``Engine.open``
                               is the composition root's, ``agenttx.app``)
settings                       ``config``: ``EngineConfig`` (frozen), ``Clock``
transaction images             ``images``: ``TxImages`` — cache, load, catch-up from another
                               replica, the locked context, every durable compare-and-set
one transaction in memory      ``runtime``: ``TxRuntime`` (write set, staged effects, lazy
                               graph) and ``StepRun``, the scope one attempt runs in
step pipeline                  ``steps``: ``StepExecutor`` — check → parse → tool → references
                               → validate → run under timeout → succeed / fail / unknown
rewind and compensation        ``rewind``: ``Rewinder`` (two-phase when compensations run)
attempt numbers                ``attempts``: each attempt of a step its own number, across
                               failures, rewinds, undo and redo
undo / redo of one step        ``undo``: ``StepHistory``; ``revisions``: ``RevisionRules`` (what
                               may be undone or redone, the GetTransaction counters)
dry runs, fidelity levels      ``dryrun``: ``DryRunner``, ``DryRunScope`` (keeps nothing)
the policy's word on a call    ``tool_policy``: ``ToolPolicy`` (default ``ALLOW_ALL``)
commit                         ``commit``: ``Committer`` — validation per isolation, the plan,
                               conflict abort, releasing effects through the dispatcher
recovery and maintenance       ``recovery``: ``Recovery`` — crashed work (an interrupted
                               outside step becomes an unknown outcome), the idle reaper,
                               pruning; ``background``: the loops
unknown outcomes               ``reconcile``: ``Reconciler`` — the provider-operation
                               checkpoint, ``reconcile_step`` (leased) and ``resolve_step``
unknown undo outcomes          ``undo_outcomes``: the waiting records (a timed-out or
                               ``UncertainOutcome`` undo, never run again); ``undo_reconcile``:
                               ``UndoReconciler`` — its ``undo_reconcile`` handler or an operator
compensation contracts         ``contracts``: each step's verdict (run, awaiting approval, past
                               its window, not supported), what a commit keeps, the plan
compensating a commit          ``compensate``: ``Compensator`` — the compensating transaction
compensation approval          ``compensation_approval``: the waiting state, the approver check
step leases                    ``leases``: who owns a RUNNING step, whether it is gone
request idempotency            ``requests``: ``RequestLog`` — stored replies by request id
a transaction by another key   ``lookup``: ``TransactionFinder`` — by a receipt id or a call's
                               request id, with its end and its receipts
reads                          ``reads``: ``TransactionReader`` — views, listings, watch;
                               ``graph_cache``: the graphs of a few long transactions, kept
                               to be extended by their new steps on the next read
lifecycle states               ``states``: the one transition table
rollback decisions             ``controller``: ``RollbackController`` and its budget
references ``${steps.N.x}``    ``refs``
dependency graph, root cause   ``graph``
failure → one-line hint        ``hints`` (rules in ``hint_rules.toml``)
request caps                   ``limits`` (including the step reply's size)
embedded API argument types    ``callargs``: InvalidArgument for wrong types, named
CPU-heavy work off the loop    ``offload``: by size, on a worker thread
the outbox for operators       ``outbox``: ``EffectDesk`` — effects listed with their last
                               error, a dead letter requeued and tried once
audit chain                    ``audit``: each event's record (``step_event``,
                               ``rollback_event`` …), ``AuditReader`` (read, verify); records
                               are chained by ``TxImages.chain`` and ride on the event's write
watch events                   ``events``: ``EventBus``
read models                    ``views``: ``TransactionInfo`` and the rebuilt graph
cancellation-proof calls       ``eager``: ``run_detached``, ``leave_eager``
preview, receipts, approvals   ``approvals``: ``Approvals`` — receipts bound to a change hash
                               and revision, approval once by another principal, what a
                               commit must show; ``changes``: the change set and its hash
the safety policy file         ``safety``: ``SafetyPolicy``, ``load_safety_policy``
who may do what (callers)      ``access``: ``Access`` — tenant and owner checks per call
secret fields masked           ``masking``: ``Redactor`` — stored and returned values
what maintenance deletes       ``retention``: ``Retention`` — ended transactions, chains
a caller cancelling its step   ``cancels``: ``RunningTools`` — the running tools' tasks
=============================  ==============================================================

Who calls whom: ``Engine`` hands each call to one part — a step to ``StepExecutor``, a commit
to ``Committer``, a rollback to ``Rewinder``, crashed work and the reaper to ``Recovery``,
reads to ``TransactionReader`` — wrapping mutating calls that carry a request id in
``RequestLog``. Every part changes a
transaction only through ``TxImages`` (lock, compare-and-set, mirror, event); the step
pipeline, the committer and recovery undo through the ``Rewinder``. Parts get their
collaborators at construction; none holds the engine.

Layering: ``core`` imports ``agenttx.errors``, ``agenttx.types``, ``agenttx.receipts``,
``agenttx.jsontext``,
``agenttx.numbers``, ``agenttx.jsonpolicy``, ``agenttx.audit``, ``agenttx.settings`` (the
settings ``EngineConfig`` extends), the ``Store`` contract
(``agenttx.store.contract``) and ``agenttx.tools``; never a concrete store, the store
factory, a channel or the outbox dispatcher (the engine takes one through the ``Dispatcher``
protocol), a driver or an adapter (gRPC, MCP, client). What builds those and the engine over
them is the composition root, ``agenttx.app``, whose ``open_engine`` is ``Engine.open``
(``tests/repo/test_core_layering.py`` checks all of this).
"""
