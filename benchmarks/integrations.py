"""Agent frameworks: what an adapter adds to a tool call, against the framework's own tool call
in the same run (issue 25: at most 1.3× the framework's call plus the step's durable write).

For LangGraph, the OpenAI Agents SDK and pydantic-ai, a scripted model (no network) makes
``CALLS`` tool calls, one a turn, then answers in text. Three variants, through the
interfaces users use:

- **plain** (a): the framework alone, with a plain async tool of its own doing the same trivial
  work as ``kv.put`` (the key and value into a dict, the same answer): LangGraph's own
  ``ToolNode``, the SDK's ``function_tool``, a pydantic-ai ``FunctionToolset``. Async, as the
  wrapped tools are: a sync tool would add each framework's hop to a worker thread to (a).
  The graph or agent is built once, as a user without AgentTx would.
- **wrapped** (b): the same run inside ``transaction(engine, …)`` on an embedded SQLite
  ``Engine``, the tool the built-in ``kv.put`` offered by the adapter (``tx.tools()`` /
  ``tx.toolset()``, only ``kv--put`` kept): each call is a real step. Timed from entering the
  block to its commit, the graph or agent built inside it as docs/integrations.md shows.
- **floor** (c): the step's durable write alone, ``begin``, ``CALLS`` × ``execute_step(kv.put)``
  and ``commit`` on the same engine, each step with a request id as the adapter sends one (so
  that a resumed run is answered from the stored reply: docs/integrations.md).

Each sample is one run's wall time over ``CALLS``. The variants alternate in blocks, the order
rotating (a b c, b c a, c a b …), so machine load touches all alike; the figure is
b / (a + c) of the p50s, per round, the median round headlined. The engine's own time inside
each wrapped run is clocked too (b's ``engine``), so ``b − a − engine`` is the adapter's part.
When a framework misses the aim, its wrapped run is profiled (cProfile): self time by area.

    python -m benchmarks.integrations           # full run: benchmarks/results/integrations.json
    python -m benchmarks.integrations --quick   # smoke run
"""

from __future__ import annotations

import asyncio
import cProfile
import dataclasses
import json
import pstats
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import agenttx
from benchmarks.harness import (
    RESULTS_DIR,
    AreaRule,
    Out,
    area_of,
    bench_parser,
    finish_machine,
    machine_info,
    md_table,
    output_of,
    read_result,
    rounds_of,
    scratch,
    short_source,
    stats_us,
    write_result,
)

CALLS = 10  # tool calls a run, one a model turn, then a text answer
TARGET_RATIO = 1.3  # issue 25: wrapped ≤ 1.3 × (plain + the step's durable write)
PACKAGES = ("langgraph", "langchain-core", "openai-agents", "pydantic-ai-slim")
SHOWN = "kv--put"  # kv.put as the model sees it (agenttx.integrations.provider_name)

Run = Callable[[], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class Runs:
    """One framework's two runs, and what the wrapped one spent setting up inside the block."""

    plain: Run
    wrapped: Run
    # ns of each wrapped run from entering the block to its first model call: listing the
    # service's tools and building the graph or agent around them
    setup_ns: list[int]


# --------------------------------------------------------------------------- the engine side


class EngineClock:
    """The embedded engine, its ``begin``, ``execute_step`` and ``commit`` clocked: ``spent`` is
    the nanoseconds inside them since the last ``lap``. The floor calls the unclocked ones."""

    def __init__(self, engine: agenttx.Engine) -> None:
        self.engine = engine
        self.spent = 0
        self.begin = engine.begin  # the floor's, unclocked
        self.execute_step = engine.execute_step
        self.commit = engine.commit
        for name in ("begin", "execute_step", "commit"):
            setattr(engine, name, self._clocked(getattr(engine, name)))

    def _clocked(self, inner: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def clocked(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return await inner(*args, **kwargs)
            finally:
                self.spent += time.perf_counter_ns() - t0

        return clocked

    def lap(self) -> int:
        spent, self.spent = self.spent, 0
        return spent


def floor_run(clock: EngineClock) -> Run:
    """(c): begin, ``CALLS`` kv.put steps and commit, straight on the engine; each step with
    a request id, as the adapter sends it (the id a resumed run is answered by: its reply is
    part of the step's durable write)."""

    async def run() -> None:
        tx = (await clock.begin(agent_id="floor")).transaction_id
        for i in range(CALLS):
            r = await clock.execute_step(
                tx, i + 1, "kv.put", {"key": f"bench/{i}", "value": i}, request_id=f"{tx}/{i}"
            )
            assert r.status.value == "SUCCESS", r
        done = await clock.commit(tx)
        assert done.steps_committed == CALLS, done

    return run


def plain_kv_put(state: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """The plain tool's work: what kv.put does to its key, in a dict, and kv.put's answer."""
    state[key] = value
    return {"key": key, "value": value}


def key_value(done: int) -> dict[str, Any]:
    """The arguments of the model's next call, after ``done`` calls."""
    return {"key": f"bench/{done}", "value": done}


# --------------------------------------------------------------------------- LangGraph


def langgraph_runs(clock: EngineClock) -> Runs:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.tools import StructuredTool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from agenttx.integrations import langgraph as agenttx_langgraph

    def model(tool: str) -> tuple[GenericFakeChatModel, list[list[BaseMessage]]]:
        """LangChain's fake chat model, answering from the messages it was last sent."""
        sent: list[list[BaseMessage]] = []

        def answers() -> Iterator[AIMessage]:
            while True:
                done = sum(isinstance(m, ToolMessage) for m in sent[-1])
                if done < CALLS:
                    call = {"name": tool, "args": key_value(done), "id": f"c{done}"}
                    yield AIMessage("", tool_calls=[{**call, "type": "tool_call"}])
                else:
                    yield AIMessage("done")

        return GenericFakeChatModel(messages=answers()), sent

    def graph(agent: Any, tools: Any) -> Any:
        def route(state: dict[str, Any]) -> str:
            last = state["messages"][-1]
            return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

        b = StateGraph(MessagesState)
        b.add_node("agent", agent)
        b.add_node("tools", tools)
        b.add_edge(START, "agent")
        b.add_conditional_edges("agent", route, ["tools", END])
        b.add_edge("tools", "agent")
        return b.compile()

    state: dict[str, Any] = {}
    setup_ns: list[int] = []

    async def put(key: str, value: Any) -> dict[str, Any]:
        return plain_kv_put(state, key, value)

    kv_put = StructuredTool.from_function(
        coroutine=put,
        name="kv_put",
        description="Set a key in a dict.",
        args_schema={
            "type": "object",
            "properties": {"key": {"type": "string"}, "value": {}},
            "required": ["key"],
        },
    )
    plain_model, plain_sent = model("kv_put")

    async def plain_agent(s: dict[str, Any]) -> dict[str, Any]:
        plain_sent.append(s["messages"])
        return {"messages": [await plain_model.ainvoke(s["messages"])]}

    plain_graph = graph(plain_agent, ToolNode([kv_put]))
    prompt = [HumanMessage("Put ten keys.")]

    async def plain() -> None:
        state.clear()
        out = await plain_graph.ainvoke({"messages": prompt})
        assert len(state) == CALLS, state
        assert out["messages"][-1].content == "done", out

    async def wrapped() -> None:
        async with agenttx_langgraph.transaction(clock.engine, agent_id="lg") as tx:
            t0 = time.perf_counter_ns()
            tools = [t for t in await tx.tools() if t.name == SHOWN]
            llm, sent = model(SHOWN)

            async def agent(s: dict[str, Any]) -> dict[str, Any]:
                sent.append(tx.with_constraints(s["messages"]))
                return {"messages": [await llm.ainvoke(sent[-1])]}

            built = graph(agent, await tx.tool_node(tools))
            setup_ns.append(time.perf_counter_ns() - t0)
            await built.ainvoke({"messages": prompt})
        assert tx.result is not None
        assert tx.result.steps_committed == CALLS, tx.result

    return Runs(plain, wrapped, setup_ns)


# --------------------------------------------------------------------------- OpenAI Agents SDK


def openai_agents_runs(clock: EngineClock) -> Runs:
    from agents import (
        Agent,
        Model,
        ModelResponse,
        RunConfig,
        Runner,
        Usage,
        function_tool,
        set_tracing_disabled,
    )
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from agenttx.integrations import openai_agents as agenttx_agents

    set_tracing_disabled(True)  # the SDK would export traces to OpenAI

    class ScriptedModel(Model):
        """Calls ``tool`` until it has ``CALLS`` outputs in its input, then answers."""

        def __init__(self, tool: str) -> None:
            self.tool = tool

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            items = kwargs.get("input", args[1] if len(args) > 1 else [])
            done = sum(
                1
                for i in items
                if (i.get("type") if isinstance(i, dict) else getattr(i, "type", ""))
                == "function_call_output"
            )
            if done < CALLS:
                out: Any = ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{done}",
                    call_id=f"c{done}",
                    name=self.tool,
                    arguments=json.dumps(key_value(done)),
                    status="completed",
                )
            else:
                text = ResponseOutputText(type="output_text", text="done", annotations=[])
                out = ResponseOutputMessage(
                    type="message", id="m", role="assistant", status="completed", content=[text]
                )
            return ModelResponse(output=[out], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the scripted model answers Runner.run only")

    state: dict[str, Any] = {}
    setup_ns: list[int] = []

    @function_tool
    async def kv_put(key: str, value: int) -> dict[str, Any]:
        """Set a key in a dict."""
        return plain_kv_put(state, key, value)

    plain_agent = Agent(
        name="plain", instructions="Put keys.", model=ScriptedModel("kv_put"), tools=[kv_put]
    )
    turns = CALLS + 2

    async def plain() -> None:
        state.clear()
        r = await Runner.run(plain_agent, "Put ten keys.", max_turns=turns, run_config=RunConfig())
        assert len(state) == CALLS, state
        assert r.final_output == "done", r

    async def wrapped() -> None:
        async with agenttx_agents.transaction(clock.engine, agent_id="oa") as tx:
            t0 = time.perf_counter_ns()
            agent = Agent(
                name="wrapped",
                instructions="Put keys.",
                model=ScriptedModel(SHOWN),
                tools=[t for t in await tx.tools() if t.name == SHOWN],
            )
            setup_ns.append(time.perf_counter_ns() - t0)
            r = await Runner.run(
                agent, "Put ten keys.", max_turns=turns, run_config=tx.run_config()
            )
        assert r.final_output == "done", r
        assert tx.result is not None
        assert tx.result.steps_committed == CALLS, tx.result

    return Runs(plain, wrapped, setup_ns)


# --------------------------------------------------------------------------- pydantic-ai


def pydantic_ai_runs(clock: EngineClock) -> Runs:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    from agenttx.integrations import pydantic_ai as agenttx_pydantic_ai

    def model(tool: str) -> FunctionModel:
        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            done = sum(
                isinstance(p, ToolReturnPart) for m in messages for p in getattr(m, "parts", ())
            )
            if done < CALLS:
                return ModelResponse(parts=[ToolCallPart(tool, key_value(done), f"c{done}")])
            return ModelResponse(parts=[TextPart("done")])

        return FunctionModel(answer)

    state: dict[str, Any] = {}
    setup_ns: list[int] = []

    async def kv_put(key: str, value: int) -> dict[str, Any]:
        """Set a key in a dict."""
        return plain_kv_put(state, key, value)

    plain_tools = FunctionToolset([kv_put])
    plain_agent = Agent(model("kv_put"))
    wrapped_agent = Agent(model(SHOWN))

    async def plain() -> None:
        state.clear()
        r = await plain_agent.run("Put ten keys.", toolsets=[plain_tools])
        assert len(state) == CALLS, state
        assert r.output == "done", r

    async def wrapped() -> None:
        async with agenttx_pydantic_ai.transaction(clock.engine, agent_id="pai") as tx:
            t0 = time.perf_counter_ns()
            only_kv_put = tx.toolset().filtered(lambda ctx, d: d.name == SHOWN)
            setup_ns.append(time.perf_counter_ns() - t0)  # its tools are listed in the run
            r = await wrapped_agent.run("Put ten keys.", toolsets=[only_kv_put])
        assert r.output == "done", r
        assert tx.result is not None
        assert tx.result.steps_committed == CALLS, tx.result

    return Runs(plain, wrapped, setup_ns)


FRAMEWORKS: dict[str, Callable[[EngineClock], Runs]] = {
    "langgraph": langgraph_runs,
    "openai_agents": openai_agents_runs,
    "pydantic_ai": pydantic_ai_runs,
}


# --------------------------------------------------------------------------- the measurement


@dataclasses.dataclass(frozen=True)
class Sizes:
    blocks: int  # blocks a round; each runs every variant once in a rotating order
    runs_per_block: int  # runs of one variant in a row, within a block
    warmup: int  # untimed runs of each variant first
    profile_runs: int  # wrapped runs under cProfile, when the aim is missed


FULL = Sizes(blocks=12, runs_per_block=8, warmup=10, profile_runs=60)
QUICK = Sizes(blocks=3, runs_per_block=2, warmup=1, profile_runs=5)


async def open_engine(d: Path) -> agenttx.Engine:
    """An embedded engine on a SQLite file, default durability (the built-in tools only)."""
    return await agenttx.Engine.open(
        f"sqlite:///{d / 'agenttx.db'}", fs_root=d / "files", outbox_path=d / "outbox.jsonl"
    )


async def one_round(name: str, sizes: Sizes) -> dict[str, Any]:
    """One framework, one fresh engine: the variants interleaved in blocks; per-call figures."""
    with scratch(f"integrations-{name}") as d:
        engine = await open_engine(d)
        try:
            clock = EngineClock(engine)
            runs = FRAMEWORKS[name](clock)
            variants: dict[str, Run] = {
                "plain": runs.plain,
                "wrapped": runs.wrapped,
                "floor": floor_run(clock),
            }
            samples: dict[str, list[int]] = {v: [] for v in variants}
            engine_ns: list[int] = []
            for run in variants.values():
                for _ in range(sizes.warmup):
                    await run()
            clock.lap()
            runs.setup_ns.clear()
            order = list(variants)
            for block in range(sizes.blocks):
                for v in order[block % 3 :] + order[: block % 3]:
                    for _ in range(sizes.runs_per_block):
                        t0 = time.perf_counter_ns()
                        await variants[v]()
                        samples[v].append((time.perf_counter_ns() - t0) // CALLS)
                        spent = clock.lap()
                        if v == "wrapped":
                            engine_ns.append(spent // CALLS)
            res: dict[str, Any] = {f"{v}_us": stats_us(s) for v, s in samples.items()}
            res["wrapped_engine_us"] = stats_us(engine_ns)
            res["wrapped_setup_us"] = stats_us([ns // CALLS for ns in runs.setup_ns])
            a, b, c = (res[f"{v}_us"]["p50"] for v in ("plain", "wrapped", "floor"))
            res["ratio"] = round(b / (a + c), 3)
            res["adapter_us"] = round(b - a - res["wrapped_engine_us"]["p50"], 1)
            return res
        finally:
            await engine.close()


async def profile_round(name: str, sizes: Sizes) -> dict[str, Any]:
    """One framework's plain and wrapped runs under cProfile, on a fresh engine after a
    warm-up: the wrapped run's self time a call by area, and what it spends beyond the plain
    run's in each area (``extra``, what the adapter and the step add)."""
    with scratch(f"integrations-{name}-profile") as d:
        engine = await open_engine(d)
        try:
            runs = FRAMEWORKS[name](EngineClock(engine))
            for _ in range(sizes.warmup):
                await runs.plain()
                await runs.wrapped()
            # one profiler each, the runs alternating, so load and warmth touch both alike
            profs = {"plain": cProfile.Profile(), "wrapped": cProfile.Profile()}
            for _ in range(sizes.profile_runs):
                for v, prof in profs.items():
                    prof.enable()
                    await getattr(runs, v)()
                    prof.disable()
            plain, wrapped = (profile_areas(profs[v], sizes.profile_runs) for v in profs)
        finally:
            await engine.close()
    extra = {
        k: v["us_per_call"] - plain["areas"].get(k, {}).get("us_per_call", 0.0)
        for k, v in wrapped["areas"].items()
    }
    wrapped["plain_areas"] = plain["areas"]
    wrapped["extra_us_per_call"] = dict(sorted(extra.items(), key=lambda kv: -kv[1]))
    return wrapped


# --------------------------------------------------------------------------- profile

_FRAMEWORK_FILES = {
    "langgraph": ("/langgraph/", "/langchain_core/", "/langchain/"),
    "openai_agents": ("/agents/", "/openai/"),
    "pydantic_ai": ("/pydantic_ai/", "/pydantic_graph/"),
}
# Where a wrapped run's self time goes; the first match wins (benchmarks.harness.area_of).
_AREAS: list[AreaRule] = [
    ("waiting in epoll (the store's writer thread)", lambda f, fn, b: b and "poll" in fn),
    ("hand-off to the writer thread", lambda f, fn, b: b and "SimpleQueue" in fn),
    ("SQLite (C calls)", lambda f, fn, b: b and any(x in fn for x in ("sqlite3", "Connection."))),
    ("AgentTx integrations", lambda f, fn, b: "/agenttx/integrations/" in f),
    ("AgentTx store", lambda f, fn, b: "/agenttx/store/" in f),
    ("AgentTx engine and tools", lambda f, fn, b: "/agenttx/" in f),
    *[
        (f"framework: {name}", lambda f, fn, b, m=markers: any(x in f for x in m))
        for name, markers in _FRAMEWORK_FILES.items()
    ],
    ("pydantic / pydantic-core", lambda f, fn, b: "/pydantic" in f or "pydantic_core" in fn),
    ("asyncio event loop", lambda f, fn, b: "/asyncio/" in f or (b and "_asyncio" in fn)),
    ("stdlib", lambda f, fn, b: "/lib/python3" in f and "site-packages" not in f),
    ("builtins", lambda f, fn, b: b),
]


def profile_areas(prof: cProfile.Profile, runs: int) -> dict[str, Any]:
    """``runs`` runs' cProfile (which inflates Python code against C; only this thread, so
    the store's writer thread shows as waiting in epoll): self time a call by area, and the
    functions with the most."""
    calls = runs * CALLS
    st = pstats.Stats(prof)
    table = st.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in table.values())
    areas: dict[str, float] = {}
    rows = []
    for (filename, line, func), (_cc, nc, tt, _ct, _callers) in table.items():
        a = area_of(_AREAS, filename, func)
        areas[a] = areas.get(a, 0.0) + tt
        rows.append(
            {
                "function": f"{short_source(filename)}:{line}({func})",
                "calls_per_call": nc / calls,
                "self_us_per_call": tt / calls * 1e6,
                "pct": 100 * tt / total,
            }
        )
    rows.sort(key=lambda r: -r["self_us_per_call"])
    return {
        "runs": runs,
        "areas": {
            k: {"us_per_call": v / calls * 1e6, "pct": 100 * v / total}
            for k, v in sorted(areas.items(), key=lambda kv: -kv[1])
        },
        "top_self": rows[:15],
    }


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose ratio is the median (the upper one of two), every round's ratio beside."""
    ranked = sorted(rounds, key=lambda r: r["ratio"])
    chosen = dict(ranked[len(ranked) // 2])
    chosen["ratio_rounds"] = [r["ratio"] for r in rounds]
    return chosen


# --------------------------------------------------------------------------- tables


def summary_rows(res: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for name in FRAMEWORKS:
        r = res.get("frameworks", {}).get(name)
        if r is None:
            continue
        rows.append(
            [
                name,
                r["plain_us"]["p50"],
                r["wrapped_us"]["p50"],
                r["floor_us"]["p50"],
                r["wrapped_engine_us"]["p50"],
                r["wrapped_setup_us"]["p50"],
                r["adapter_us"],
                r["ratio"],
                ", ".join(f"{x:.2f}" for x in r["ratio_rounds"]),
                "met" if r["ratio"] <= TARGET_RATIO else "not met",
            ]
        )
    return rows


COLUMNS = [
    "framework",
    "(a) plain",
    "(b) wrapped",
    "(c) floor",
    "engine in (b)",
    "setup in (b)",
    "adapter",
    "b / (a + c)",
    "rounds",
    f"≤ {TARGET_RATIO}×",
]


PROFILE_COLUMNS = ["area", "wrapped, µs a call", "%", "beyond plain, µs a call"]


def profile_rows(p: dict[str, Any]) -> list[list[Any]]:
    """The areas of a wrapped run's self time, most first, with what each adds to the plain."""
    extra = p["extra_us_per_call"]
    return [[k, v["us_per_call"], v["pct"], extra[k]] for k, v in list(p["areas"].items())[:10]]


def markdown(res: dict[str, Any]) -> str:
    parts = [
        f"Per tool call, p50 µs, {res.get('calls_per_run')} calls a run; "
        f"{res.get('machine', {}).get('date')}, {res.get('machine', {}).get('git')}\n",
        md_table(COLUMNS, summary_rows(res)),
    ]
    for name, r in res.get("frameworks", {}).items():
        if "profile" in r:
            parts.append(f"\n{name}, wrapped run under cProfile: self time per call by area\n")
            parts.append(md_table(PROFILE_COLUMNS, profile_rows(r["profile"])))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__.splitlines()[0], RESULTS_DIR / "integrations.json")
    ap.add_argument("--only", choices=list(FRAMEWORKS), action="append", help="this framework")
    ap.add_argument("--profile", action="store_true", help="profile every wrapped run, met or not")
    ns = ap.parse_args(argv)
    if ns.markdown:
        print(markdown(read_result(Path(ns.output or ns.default_output))))
        return
    out = Out()
    started = time.perf_counter()
    sizes = QUICK if ns.quick else FULL
    res: dict[str, Any] = {
        "machine": machine_info(PACKAGES),
        "target_ratio": TARGET_RATIO,
        "calls_per_run": CALLS,
        "work": "the built-in kv.put via tx.tools() / tx.toolset() (state effect, a real "
        "step); the plain tool puts the key in a dict",
        "sizes": dataclasses.asdict(sizes),
        "frameworks": {},
    }
    for name in ns.only or list(FRAMEWORKS):
        out.note(f"[dim]running {name} …[/dim]")
        rounds = []
        for _ in range(rounds_of(ns)):
            rounds.append(asyncio.run(one_round(name, sizes)))
        chosen = median_round(rounds)
        if ns.profile or chosen["ratio"] > TARGET_RATIO:
            out.note(f"[dim]profiling {name} …[/dim]")
            chosen["profile"] = asyncio.run(profile_round(name, sizes))
        chosen["p50_rounds_us"] = {
            v: [r[f"{v}_us"]["p50"] for r in rounds] for v in ("plain", "wrapped", "floor")
        }
        chosen["ratio_median"] = statistics.median(chosen["ratio_rounds"])
        res["frameworks"][name] = chosen
    out.table(
        "An adapter's tool call against the framework's own (p50 µs a call)",
        COLUMNS,
        summary_rows(res),
    )
    for name, r in res["frameworks"].items():
        if "profile" in r:
            out.table(
                f"{name}, wrapped run under cProfile: self time a call by area",
                PROFILE_COLUMNS,
                profile_rows(r["profile"]),
            )
    finish_machine(res, started)
    write_result(out, output_of(ns), res)


if __name__ == "__main__":
    main()
