"""The safety policy file (``--policy``): approval for named tools, effect classes and tenants,
forbidden tools, a step cap, the autonomous mode — enforced by the engine on every store; a
bad file refused at load with its line and the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.core.safety import MAX_POLICY_FILE_BYTES, load_safety_policy
from agenttx.errors import ApprovalRequired, PolicyViolation, StartupError


@agenttx.tool(name="pol.launch", effect="irreversible")
async def launch(ctx: agenttx.ToolContext, target: str) -> dict[str, str]:
    return {"launched": target}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[approval]\ntools = ['a']\n\n[nope]\nx = 1\n", 4, "[nope]: unknown section"),
        ("[forbid]\nirreversible = true\ntool = ['x']\n", 3, "[forbid] tool: unknown key"),
        ("[forbid]\nirreversible = 'yes'\n", 2, "must be true or false"),
        ("[approval]\n# why\neffects = ['state', 'explosive']\n", 3, "unknown effect class"),
        ("[limits]\nmax_steps = 0\n", 2, "must be 1..1000000"),
        ("[limits]\nmax_steps = 1.5\n", 2, "must be a whole number"),
        ("[approval]\ntenants = 'prod'\n", 2, "must be a list of non-empty strings"),
        ("[modes]\nautonomous_trusted = 1\n", 2, "must be true or false"),
    ],
)
def test_a_bad_policy_file_is_refused_with_its_line_and_reason(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(StartupError) as err:
        load_safety_policy(path)
    assert f"{path}:{line}:" in err.value.message
    assert words in err.value.message


def test_a_policy_file_that_is_not_toml_or_not_there_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"not valid TOML: .*line 2"):
        load_safety_policy(write(tmp_path, "[limits]\nmax_steps = = 3\n"))
    with pytest.raises(StartupError, match="cannot read it"):
        load_safety_policy(tmp_path / "missing.toml")
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (MAX_POLICY_FILE_BYTES + 1))
    with pytest.raises(StartupError, match="byte limit"):
        load_safety_policy(big)
    (tmp_path / "bin.toml").write_bytes(b"[limits]\n\xff\n")
    with pytest.raises(StartupError, match=r"bin.toml:2: not UTF-8"):
        load_safety_policy(tmp_path / "bin.toml")


async def test_an_engine_will_not_open_with_a_bad_policy(open_engine: Any, tmp_path: Path) -> None:
    with pytest.raises(StartupError, match="unknown section"):
        await open_engine(safety_policy=write(tmp_path, "[bogus]\n"))


async def test_forbidden_tools_and_the_step_cap_are_refused_before_anything_runs(
    open_engine: Any, tmp_path: Path
) -> None:
    policy = write(
        tmp_path,
        "[forbid]\nirreversible = true\ntools = ['fs.write']\n[limits]\nmax_steps = 2\n",
    )
    engine = await open_engine(tools=[launch], safety_policy=policy)
    tx = (await engine.begin()).transaction_id
    with pytest.raises(PolicyViolation) as irreversible:
        await engine.execute_step(tx, 1, "pol.launch", {"target": "moon"})
    assert irreversible.value.rule == "forbid_irreversible"
    with pytest.raises(PolicyViolation) as named:
        await engine.execute_step(tx, 1, "fs.write", {"path": "a", "contents": "b"})
    assert named.value.rule == "forbid_tools"
    info = await engine.get_transaction(tx)
    assert (info.next_step_id, info.steps, info.revision) == (1, [], 1)  # nothing journalled
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    await engine.execute_step(tx, 2, "kv.put", {"key": "b", "value": 2})
    with pytest.raises(PolicyViolation) as cap:
        await engine.execute_step(tx, 3, "kv.put", {"key": "c", "value": 3})
    assert cap.value.rule == "max_steps"
    assert "cap of 2 steps" in cap.value.message
    assert (await engine.commit(tx)).committed


async def test_approval_for_named_tools_and_effect_classes(
    open_engine: Any, tmp_path: Path
) -> None:
    policy = write(tmp_path, "[approval]\ntools = ['kv.delete']\neffects = ['staged']\n")
    engine = await open_engine(safety_policy=policy)

    free = (await engine.begin(principal="bob")).transaction_id
    await engine.execute_step(free, 1, "kv.put", {"key": "x", "value": 1})
    assert (await engine.preview_commit(free)).approval_required is False
    assert (await engine.commit(free)).committed

    tx = (await engine.begin(principal="bob")).transaction_id
    await engine.execute_step(tx, 1, "kv.delete", {"key": "x"})
    await engine.execute_step(tx, 2, "effect.stage", {"channel": "c", "payload": {}})
    with pytest.raises(ApprovalRequired) as need:
        await engine.commit(tx)
    assert "tool 'kv.delete'" in need.value.message
    assert "effect class 'staged'" in need.value.message
    p = await engine.preview_commit(tx)
    assert p.approval_reasons == [
        "policy: tool 'kv.delete' needs approval",
        "policy: effect class 'staged' needs approval",
    ]
    await engine.approve_commit(tx, p.receipt_id, principal="alice", roles=("approver",))
    assert (await engine.commit(tx, receipt_id=p.receipt_id)).committed

    # A trusted transaction is not held by the approval rules; its steps are still checked.
    trusted = (await engine.begin(principal="ci", mode="autonomous_trusted")).transaction_id
    await engine.execute_step(trusted, 1, "kv.delete", {"key": "x"})
    assert (await engine.preview_commit(trusted)).approval_required is False
    assert (await engine.commit(trusted)).committed


async def test_approval_for_a_tenant_and_a_policy_refusing_the_trusted_mode(
    open_engine: Any, tmp_path: Path
) -> None:
    policy = write(
        tmp_path, "[approval]\ntenants = ['default']\n[modes]\nautonomous_trusted = false\n"
    )
    engine = await open_engine(safety_policy=policy)
    tx = (await engine.begin(principal="bob")).transaction_id
    with pytest.raises(ApprovalRequired, match="tenant 'default'"):
        await engine.commit(tx)  # even with no step: the tenant's every commit is approved
    with pytest.raises(PolicyViolation) as mode:
        await engine.begin(principal="ci", mode="autonomous_trusted")
    assert mode.value.rule == "modes"
