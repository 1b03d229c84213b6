"""The scripted agent's plan: three failure kinds × N steps, as the reference defines them.

Root step ``r = max(N/4, 2)``, failing step ``f = max(⌈3N/4⌉, r+2)``: (2, 6), (4, 12), (8, 24),
(16, 48) for N = 8, 16, 32, 64. The first rule that matches step ``i`` gives its tool call:

1. ``i = 1``: insert customer ``c-1``;
2. ``i = r``: ``kv.put session/customer`` = ``c-404`` (root-cause kind, until the agent has
   learned) else ``c-1``;
3. ``i = r+1``: write ``drafts/${steps.r.value}.json``;
4. ``i = f``: the failing call of the kind (invoice insert / flaky charge / broken reconcile);
5. ``i % 5 == 0``: stage an email with idempotency key ``wf-i``;
6. ``i % 3 == 0``: write ``reports/step-i.txt``;
7. otherwise ``kv.put wf/step-i = i``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

GOOD_CUSTOMER = "c-1"
BAD_CUSTOMER = "c-404"
SIZES = (8, 16, 32, 64)
QUICK_SIZES = (8, 32)


class Kind(enum.StrEnum):
    ROOT_CAUSE = "root-cause"
    TRANSIENT = "transient"
    PERSISTENT = "persistent"


@dataclass(frozen=True)
class Scenario:
    kind: Kind
    steps: int  # N

    @property
    def id(self) -> str:
        return f"{self.kind.value}-{self.steps}"

    @property
    def root(self) -> int:
        return max(self.steps // 4, 2)

    @property
    def fail_at(self) -> int:
        return max(math.ceil(3 * self.steps / 4), self.root + 2)

    def plan(self, i: int, learned: bool) -> tuple[str, dict[str, Any]]:
        """The agent's call for step ``i``: (tool name, arguments). ``learned`` is true once
        any feedback the agent received named ``customer_id``."""
        root_ref = f"${{steps.{self.root}.value}}"
        if i == 1:
            return "record.insert", {
                "table": "customers",
                "id": GOOD_CUSTOMER,
                "fields": {"name": "Acme GmbH"},
            }
        if i == self.root:
            bad = self.kind is Kind.ROOT_CAUSE and not learned
            return "kv.put", {
                "key": "session/customer",
                "value": BAD_CUSTOMER if bad else GOOD_CUSTOMER,
            }
        if i == self.root + 1:
            return "fs.write", {"path": f"drafts/{root_ref}.json", "contents": '{"status":"draft"}'}
        if i == self.fail_at:
            if self.kind is Kind.ROOT_CAUSE:
                return "bench.insert_invoice", {
                    "table": "invoices",
                    "id": "inv-1",
                    "fields": {"customer_id": root_ref, "amount": 1200},
                    "references": {"customer_id": "customers"},
                }
            if self.kind is Kind.TRANSIENT:
                return "bench.flaky", {"operation": "charge_card"}
            return "bench.broken", {"operation": "reconcile"}
        if i % 5 == 0:
            return "effect.stage", {
                "channel": "email",
                "payload": {"template": "step-complete", "step": i},
                "idempotency_key": f"wf-{i}",
            }
        if i % 3 == 0:
            return "fs.write", {"path": f"reports/step-{i}.txt", "contents": f"report for step {i}"}
        return "kv.put", {"key": f"wf/step-{i}", "value": i}

    def expected_files(self) -> set[str]:
        """Files a correct, completed run leaves in the sandbox: every ``fs.write`` of the
        corrected plan, the draft under the good customer's id."""
        files: set[str] = set()
        for i in range(1, self.steps + 1):
            tool, args = self.plan(i, learned=True)
            if tool == "fs.write":
                path = str(args["path"])
                files.add(f"drafts/{GOOD_CUSTOMER}.json" if "${" in path else path)
        return files


def scenarios(sizes: tuple[int, ...] = SIZES) -> list[Scenario]:
    return [Scenario(kind, n) for kind in Kind for n in sizes]
