"""What the graph tests need beyond the engine's use of ``DependencyGraph``: recording a failed
attempt as a node (the engine describes a failing step to ``root_cause`` by keywords instead),
and a JSON record of a graph's nodes with its replay, to prove that the graph is a pure
function of its ordered add calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agenttx.core.graph import DependencyGraph, Edge
from agenttx.core.refs import Reference

FORMAT_VERSION = 1


def add_failed_step(
    graph: DependencyGraph,
    step_id: int,
    inputs: Any,
    references: Sequence[Reference] = (),
    state_reads: Sequence[str] = (),
) -> list[Edge]:
    """Record a failed step so ``root_cause`` can read its inputs and edges. It gets incoming
    edges like any step but, having no output, it is never a producer."""
    return graph._add(step_id, inputs, None, references, state_reads, (), failed=True)


def to_dict(graph: DependencyGraph) -> dict[str, Any]:
    """A JSON-able record of the add calls that built ``graph``; ``from_dict`` replays them."""
    steps: list[dict[str, Any]] = []
    for step_id in graph._order:
        node = graph._nodes[step_id]
        steps.append(
            {
                "step_id": step_id,
                "failed": node.failed,
                "inputs": node.inputs,
                "output": node.output,
                "references": [
                    {"step_id": r.step_id, "path": list(r.path), "arg_path": list(r.arg_path)}
                    for r in node.references
                ],
                "state_reads": list(node.state_reads),
                "state_writes": list(node.state_writes),
            }
        )
    return {"version": FORMAT_VERSION, "steps": steps}


def from_dict(data: dict[str, Any]) -> DependencyGraph:
    """Rebuild a graph from ``to_dict`` output. Raises ``ValueError`` if it is malformed."""
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise ValueError(f"not a version {FORMAT_VERSION} dependency graph record")
    graph = DependencyGraph()
    try:
        for step in data["steps"]:
            references = [
                Reference(int(r["step_id"]), tuple(r["path"]), tuple(r["arg_path"]))
                for r in step["references"]
            ]
            if step["failed"]:
                add_failed_step(
                    graph, int(step["step_id"]), step["inputs"], references, step["state_reads"]
                )
            else:
                graph.add_step(
                    int(step["step_id"]),
                    step["inputs"],
                    step["output"],
                    references,
                    step["state_reads"],
                    step["state_writes"],
                )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed dependency graph record: {exc!r}") from exc
    return graph
