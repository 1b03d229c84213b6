"""Wire compatibility: a client generated at test time from ``reference_subset.proto`` (the
reference's five RPCs and fields, nothing of ours) drives a full transaction against our
server — begin with a policy, steps with references, a failure that rolls back, resume,
commit, reads, manual rollbacks — and skips the fields it does not know.

The reference client runs in a subprocess (``reference_client.py`` says why); it prints what it
saw as JSON; the assertions are here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported at run time by pytest_plugins, so that pytest rewrites its asserts
    from reference_client import ReferenceClient

# The session's reference client, generated once; ``target``, this test's engine behind a server.
pytest_plugins = ["reference_client", "served_engine"]

# What the reference client does (see reference_client.py for the driver around it).
DRIVER = r"""
from google.protobuf.unknown_fields import UnknownFieldSet

assert "ListTools" not in pb.DESCRIPTOR.services_by_name["AgentTxService"].methods_by_name
seen = {"steps": []}


def unknown(message):
    return sorted({f.field_number for f in UnknownFieldSet(message)})


def status(call):
    try:
        call()
    except grpc.RpcError as exc:
        return [exc.code().name, exc.details()]
    return ["OK", ""]


def plan(step, learned):
    return {
        1: ("record.insert", {"table": "customers", "id": "c-1"}),
        2: ("kv.put", {"key": "session/customer", "value": "c-1" if learned else "c-404"}),
        3: ("fs.write", {"path": "drafts/${steps.2.value}.json", "contents": "{}"}),
        4: ("record.insert", {"table": "invoices", "id": "i-1",
                              "fields": {"customer": "${steps.2.value}"},
                              "references": {"customer": "customers"}}),
        5: ("effect.stage", {"channel": "email", "payload": {"to": "${steps.2.value}"},
                             "idempotency_key": "wf-5"}),
    }[step]


begun = stub.BeginTransaction(pb.BeginTransactionRequest(
    agent_id="ref-agent", metadata={"goal": "invoice c-1"},
    policy=pb.RollbackPolicy(max_local_depth=2, max_global_resets=1, replay_budget_factor=2.0)))
tx = begun.transaction_id
seen["begin"] = {"next_step_id": begun.next_step_id, "unknown": unknown(begun)}

learned, step = False, begun.next_step_id
while step <= 5 and len(seen["steps"]) < 20:
    tool, arguments = plan(step, learned)
    r = stub.ExecuteStep(pb.ExecuteStepRequest(
        transaction_id=tx, step_id=step, tool_name=tool,
        arguments_json=json.dumps(arguments), raw_context=f"plan step {step}"))
    seen["steps"].append({
        "step_id": step, "tool": tool,
        "status": pb.StepStatus.Name(r.status), "strategy": pb.RollbackStrategy.Name(r.strategy),
        "next_step_id": r.next_step_id, "rollback_to_step": r.rollback_to_step,
        "constraints": list(r.constraints), "context_reset": r.context_reset,
        "clean_hint": r.clean_hint, "error_category": r.error_category,
        "output": json.loads(r.output_json) if r.output_json else None,
        "unknown": unknown(r),
    })
    learned = learned or "customer" in r.clean_hint
    step = r.next_step_id

seen["wrong_step"] = status(lambda: stub.ExecuteStep(pb.ExecuteStepRequest(
    transaction_id=tx, step_id=99, tool_name="kv.get", arguments_json="{}")))
c = stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
seen["commit"] = {"committed": c.committed, "steps_committed": c.steps_committed,
                  "effects_dispatched": c.effects_dispatched,
                  "dispatch_errors": list(c.dispatch_errors), "unknown": unknown(c)}
g = stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx))
seen["get"] = {"transaction_id": g.transaction_id, "status": g.status,
               "next_step_id": g.next_step_id, "agent_id": g.agent_id,
               "constraints": list(g.constraints), "global_resets": g.global_resets,
               "context": [[e.step_id, e.tool_name, e.raw_context] for e in g.context],
               "unknown": unknown(g)}
seen["step_after_commit"] = status(lambda: stub.ExecuteStep(pb.ExecuteStepRequest(
    transaction_id=tx, step_id=6, tool_name="kv.get", arguments_json="{}")))

other = stub.BeginTransaction(pb.BeginTransactionRequest(agent_id="ref-agent")).transaction_id
for i in (1, 2, 3):
    stub.ExecuteStep(pb.ExecuteStepRequest(transaction_id=other, step_id=i, tool_name="kv.put",
                                           arguments_json=json.dumps({"key": f"k{i}", "value": i})))
rewound = stub.RollbackTransaction(pb.RollbackTransactionRequest(
    transaction_id=other, to_step=2, reason="re-plan"))
again = stub.ExecuteStep(pb.ExecuteStepRequest(transaction_id=other, step_id=2,
                                               tool_name="kv.get", arguments_json='{"key": "k1"}'))
aborted = stub.RollbackTransaction(pb.RollbackTransactionRequest(
    transaction_id=other, reason="user cancelled"))
seen["rollback"] = {
    "rewind": [rewound.rolled_back, rewound.next_step_id, list(rewound.compensation_errors)],
    "again": [pb.StepStatus.Name(again.status), json.loads(again.output_json)],
    "abort": [aborted.rolled_back, aborted.next_step_id],
    "status": stub.GetTransaction(pb.GetTransactionRequest(transaction_id=other)).status,
    "unknown": unknown(aborted),
}
seen["not_found"] = status(lambda: stub.GetTransaction(
    pb.GetTransactionRequest(transaction_id="tx_missing")))
seen["empty_id"] = status(lambda: stub.CommitTransaction(pb.CommitTransactionRequest()))
"""


async def test_a_reference_client_drives_a_full_transaction(
    reference_client: ReferenceClient, target: str
) -> None:
    seen = await reference_client.run(DRIVER, target)

    assert seen["begin"]["next_step_id"] == 1
    steps = seen["steps"]
    assert [(s["step_id"], s["status"]) for s in steps] == [
        (1, "STEP_STATUS_SUCCESS"),
        (2, "STEP_STATUS_SUCCESS"),
        (3, "STEP_STATUS_SUCCESS"),
        (4, "STEP_STATUS_ROLLBACK_TRIGGERED"),
        (2, "STEP_STATUS_SUCCESS"),
        (3, "STEP_STATUS_SUCCESS"),
        (4, "STEP_STATUS_SUCCESS"),
        (5, "STEP_STATUS_SUCCESS"),
    ]
    # References resolve: step 3 wrote the file step 2's value names, both times.
    assert steps[2]["output"]["path"] == "drafts/c-404.json"
    assert steps[5]["output"]["path"] == "drafts/c-1.json"
    failure = steps[3]
    assert failure["strategy"] == "ROLLBACK_STRATEGY_DEPENDENCY_JUMP"
    assert (failure["rollback_to_step"], failure["next_step_id"]) == (2, 2)
    assert failure["clean_hint"].startswith("Hint: ")
    assert "c-404" in failure["clean_hint"]
    assert failure["constraints"] == [failure["clean_hint"]]
    assert failure["context_reset"] is False
    assert failure["error_category"] == "foreign_key_violation"  # the reference's own name
    assert steps[0]["strategy"] == "ROLLBACK_STRATEGY_NONE"
    assert [s["next_step_id"] for s in steps if s["status"] == "STEP_STATUS_SUCCESS"] == [
        2,
        3,
        4,
        3,
        4,
        5,
        6,
    ]

    assert seen["wrong_step"][0] == "FAILED_PRECONDITION"
    assert "expects step 6, got step 99" in seen["wrong_step"][1]
    commit = seen["commit"]
    assert commit["committed"] is True
    assert commit["steps_committed"] == 5
    assert commit["effects_dispatched"] == 1
    assert commit["dispatch_errors"] == []

    got = seen["get"]
    assert (got["status"], got["next_step_id"], got["agent_id"]) == ("COMMITTED", 0, "ref-agent")
    assert got["context"] == [
        [i, t, f"plan step {i}"]
        for i, t in enumerate(
            ["record.insert", "kv.put", "fs.write", "record.insert", "effect.stage"], start=1
        )
    ]
    assert got["constraints"] == [failure["clean_hint"]]
    assert got["global_resets"] == 0
    # Unlike the reference, an ended transaction stays readable; steps after it are refused.
    assert seen["step_after_commit"][0] == "FAILED_PRECONDITION"

    rollback = seen["rollback"]
    assert rollback["rewind"] == [True, 2, []]
    assert rollback["again"] == ["STEP_STATUS_SUCCESS", {"key": "k1", "value": 1}]
    assert rollback["abort"] == [True, 0]
    assert rollback["status"] == "ROLLED_BACK"
    assert seen["not_found"][0] == "NOT_FOUND"
    assert seen["empty_id"][0] == "INVALID_ARGUMENT"


async def test_the_old_client_skips_the_fields_it_does_not_know(
    reference_client: ReferenceClient, target: str
) -> None:
    seen = await reference_client.run(DRIVER, target)
    # Our additions arrive at their new numbers and the old client parses around them.
    # transaction_status, revision, and issue 13's snapshot and mode
    assert seen["begin"]["unknown"] == [3, 4, 5, 6]
    assert {13, 14} <= set(seen["steps"][0]["unknown"])  # transaction_status, revision
    assert 15 in seen["steps"][3]["unknown"]  # hint_key, set when the hint names a key
    assert {5, 6} <= set(seen["commit"]["unknown"])
    assert {8, 9, 10, 17, 20} <= set(seen["get"]["unknown"])  # revision, metadata, … policy
    assert {5, 6} <= set(seen["rollback"]["unknown"])
