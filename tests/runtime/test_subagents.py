"""Sub-agents shrink, never escape (seed 001, item 4)."""

from __future__ import annotations

import asyncio

import pytest

from neuralis_jupyter.contracts.envelope import Budgets, Envelope, Scope
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import SHADOW, AgentRuntime, Tool, ToolOutput, ToolRegistry, TurnRequest
from neuralis_jupyter.runtime.results import read_tool_result_tool
from neuralis_jupyter.runtime.subagents import SubagentEvent, child_registry, run_child
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store

from .helpers import OBJ, Probe, session


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


def parent_tools(probe, spawn):
    return ToolRegistry.of(
        [
            probe.tool("lookup", attested=True),
            probe.tool("search"),
            probe.tool("write_note", access="write"),
            probe.tool("ask_user"),
            Tool(
                name="spawn",
                description="run a child",
                input_schema=OBJ,
                handler=spawn,
                access="read",
                package_id=AGENT_CORE_ID,
                intrinsic=True,
            ),
        ]
    )


def test_child_registry_is_reads_within_the_parent_scope():
    probe = Probe()

    async def noop(args, ctx):
        return "x"

    tools = parent_tools(probe, noop)
    barred = ToolRegistry.of(
        [
            *tools,
            Tool(
                name="question",
                description="",
                input_schema=OBJ,
                handler=noop,
                access="read",
                package_id=AGENT_CORE_ID,
                barred_from_subagents=True,
            ),
        ]
    ).with_intrinsic([read_tool_result_tool()])
    everything = Envelope()
    assert sorted(child_registry(barred, everything).names) == [
        "ask_user",
        "lookup",
        "read_tool_result",
        "search",
        "spawn",
    ]
    narrowed = Envelope(scope=Scope.of(reads={"lookup"}, writes={"write_note"}, forbidden={"spawn"}))
    assert sorted(child_registry(barred, narrowed).names) == ["lookup", "read_tool_result"]


def run_parent(store, model, child_model, tools_for_child, envelope, mode=None, captured=None):
    probe = Probe()

    async def spawn(args, ctx):
        child_tools = child_registry(ctx.request.tools, ctx.request.envelope).filter(
            lambda t: t.name in tools_for_child
        )
        run = await run_child(ctx, task=args["task"], agent="general", tools=child_tools, model=child_model)
        captured["run"] = run
        return ToolOutput(content=run.settled.text)

    registry = parent_tools(probe, spawn)
    conv = store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
    events = []
    kwargs = {"mode": mode} if mode else {}
    request = TurnRequest(
        session=session(),
        conversation=conv,
        model=model,
        tools=registry,
        message="go",
        envelope=envelope,
        **kwargs,
    )
    settled = asyncio.run(AgentRuntime(store).run(request, on_event=events.append))
    return settled, conv, probe, events


def test_child_runs_under_the_parent_envelope_with_fresh_budgets(store):
    parent = ScriptedModel(
        [
            Reply(text="p1", calls=(Call(name="lookup", id="p-l1"),)),
            Reply(calls=(Call(name="spawn", input={"task": "look around"}, id="p-s"),)),
            Reply(text="parent done"),
        ]
    )
    child = ScriptedModel(
        [
            Reply(calls=(Call(name="lookup", id="c-l1"), Call(name="write_note", id="c-w"))),
            Reply(calls=(Call(name="search", id="c-s"),)),
            Reply(calls=(Call(name="lookup", id="c-l2"),)),
            Reply(text="never reached"),
        ]
    )
    envelope = Envelope(
        scope=Scope.of(reads={"lookup", "spawn"}, writes={"write_note"}), budgets=Budgets(max_steps=3)
    )
    captured = {}
    settled, conv, _probe, events = run_parent(
        store, parent, child, {"lookup", "search"}, envelope, captured=captured
    )
    assert settled.status == "completed"
    run = captured["run"]
    # The parent used 2 steps before spawning; the child still gets its own 3 (re-counted from zero)
    # and is suspended by the same max_steps the parent's envelope carries.
    assert run.settled.status == "suspended"
    assert run.settled.budget == "max_steps"
    assert run.settled.steps == 3
    assert child.remaining == 1
    child_rows = run.conversation.read_all()
    results = {b["tool_use_id"]: b for r in child_rows if r["role"] == "tool" for b in r["content"]}
    assert results["c-l1"]["outcome"] == "ok"
    assert results["c-w"]["outcome"] == "unavailable"  # a write never reaches a child
    assert results["c-s"]["outcome"] == "unavailable"  # outside the parent's reads: never in its catalog
    assert run.transcript_path == conv.path / "delegates" / run.run_id / "messages.jsonl"
    assert run.transcript_path.is_file()
    assert any(isinstance(e, SubagentEvent) and e.run_id == run.run_id for e in events)


def test_shadow_mode_binds_the_child(store):
    parent = ScriptedModel(
        [Reply(calls=(Call(name="spawn", input={"task": "t"}, id="s"),)), Reply(text="done")]
    )
    child = ScriptedModel(
        [Reply(calls=(Call(name="lookup", id="l"), Call(name="search", id="x"))), Reply(text="ok")]
    )
    captured = {}
    run_parent(store, parent, child, {"lookup", "search"}, Envelope(), mode=SHADOW, captured=captured)
    rows = captured["run"].conversation.read_all()
    results = {b["tool_use_id"]: b for r in rows if r["role"] == "tool" for b in r["content"]}
    assert results["l"]["outcome"] == "ok"  # attested first-party read
    assert results["x"]["outcome"] == "shadow_denied"


def test_a_child_cannot_be_handed_wider_tools(store):
    probe = Probe()
    seen = {}

    async def spawn(args, ctx):
        try:
            await run_child(ctx, task="x", agent="general", tools=ctx.request.tools, model=ScriptedModel())
        except ValueError as exc:
            seen["error"] = str(exc)
        return "refused"

    registry = parent_tools(probe, spawn)
    conv = store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
    model = ScriptedModel([Reply(calls=(Call(name="spawn", id="s"),)), Reply(text="ok")])
    asyncio.run(
        AgentRuntime(store).run(
            TurnRequest(session=session(), conversation=conv, model=model, tools=registry, message="go")
        )
    )
    assert "write_note" in seen["error"]
    assert not (conv.path / "delegates").exists()
