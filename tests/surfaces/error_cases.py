"""The conformance table's rows for the one error policy (docs/errors.md "One error policy"):
each fault a caller can make gets the same reason on every surface, and a tool's error that
quotes a credential reaches every caller masked (``leaky_tools``; the runner checks that no
reply of any case holds the credential). What needs API keys or a broken store — a missing
key, another principal's transaction, an internal error — is ``test_error_policy.py``'s."""

from __future__ import annotations

from surfaces.cases import BEGIN, Case, call, step

TOO_BIG = 1 << 20  # the largest arguments a step takes, in bytes (docs/limits.md)

ERRORS: tuple[Case, ...] = (
    Case(
        "a transaction id of digits",
        (),
        call("get_transaction", transaction_id="12345"),
        "NOT_FOUND",
        replaces=(
            "test_error_policy_surfaces::test_an_unknown_transaction_is_not_found_everywhere",
        ),
    ),
    Case(
        "a step id of 0",
        (BEGIN,),
        step(0, "kv.put", {"key": "k"}),
        "INVALID_ARGUMENT",
        replaces=(
            "test_error_policy_surfaces::test_an_invalid_argument_is_invalid_argument_everywhere "
            "(step 0)",
        ),
    ),
    Case(
        "a transaction id over its size limit",
        (),
        call("get_transaction", transaction_id="x" * 5000),
        "INVALID_ARGUMENT",
        replaces=(
            "test_error_policy_surfaces::test_an_invalid_argument_is_invalid_argument_everywhere "
            "(an id over its limit)",
        ),
    ),
    Case(
        "arguments over their size limit",
        (BEGIN,),
        step(1, "kv.put", {"key": "k", "value": "x" * TOO_BIG}),
        "INVALID_ARGUMENT",
        says={"grpc": (str(TOO_BIG),)},
        replaces=(
            "test_error_policy_surfaces::test_a_payload_too_large_is_invalid_argument_everywhere",
        ),
    ),
    Case(
        "a step of an unknown tool",
        (BEGIN,),
        step(1, "no.such.tool", {}),
        {"status": "ROLLBACK_TRIGGERED", "error_category": "unknown_tool"},
        replaces=("test_error_policy_surfaces::test_an_unknown_tool_is_named_so_everywhere",),
    ),
    Case(
        "a tool whose error quotes a credential",
        (BEGIN,),
        step(1, "leaky.call", {}),
        {"status": "ROLLBACK_TRIGGERED"},
        says={"*": ("***",)},  # masked in place, the words around it kept
        replaces=(
            "test_error_policy_surfaces::test_a_tool_whose_error_holds_a_secret_fails_its_step_masked",
        ),
    ),
    Case(
        "an undo whose error quotes a credential",
        (BEGIN, step(1, "leaky.write", {})),
        call("rollback", transaction_id="$tx"),
        {"transaction_status": "ROLLED_BACK"},
        says={"*": ("provider said password=***",)},
        replaces=(
            "test_error_policy_surfaces::test_an_undo_whose_error_holds_a_secret_is_reported_masked",
        ),
    ),
)
