"""What a Workbench turn wires around the runtime: the stream scope of session tickets, shadow audit
rows, the todos ledger in the session block and compaction re-applied on the next turn."""

from __future__ import annotations

import asyncio

import pytest

from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime.context import SHADOW
from neuralis_jupyter.store import Store
from neuralis_jupyter.store.tickets import TicketError
from neuralis_jupyter.workbench import Workbench


@pytest.fixture
def bench(tmp_path):
    return Workbench(store=Store.open(tmp_path / "home"))


def run_turn(bench, target, *replies, message="go", **kwargs):
    model = ScriptedModel(list(replies))

    async def go():
        async with bench.turn(target, message, model=model, **kwargs) as request:
            return await bench.runtime.run(request)

    settled = asyncio.run(go())
    model.assert_complete()
    return settled, model


def test_a_turns_tickets_die_when_the_turn_ends(bench):
    target = bench.target("alice")

    async def go():
        async with bench.turn(target, "hi", model=ScriptedModel()) as request:
            ticket = await asyncio.to_thread(bench.store.tickets.mint, request.session)
            during = await asyncio.to_thread(bench.store.tickets.verify, ticket)
        return ticket, during, request.session

    ticket, during, session = asyncio.run(go())
    assert during == session
    with pytest.raises(TicketError):
        bench.store.tickets.verify(ticket)


def test_a_turn_that_fails_still_ends_its_tickets(bench):
    target = bench.target("alice")
    minted: list[str] = []

    async def go():
        async with bench.turn(target, "hi", model=ScriptedModel()) as request:
            minted.append(await asyncio.to_thread(bench.store.tickets.mint, request.session))
            raise RuntimeError("the caller broke mid-turn")

    with pytest.raises(RuntimeError, match="mid-turn"):
        asyncio.run(go())
    with pytest.raises(TicketError):
        bench.store.tickets.verify(minted[0])


def test_a_shadow_turn_audits_what_it_captured(bench):
    target = bench.target("alice")
    fetch = Call(name="web_fetch", input={"url": "https://example.com/report"}, id="w1")
    settled, _ = run_turn(bench, target, Reply(calls=(fetch,)), Reply(text="noted"), mode=SHADOW)
    assert settled.status == "completed"
    [row] = bench.store.audit.list(target.session.project_id, action="tool.shadowed")
    assert (row.subject, row.outcome, row.conversation_id) == (
        "web_fetch",
        "shadowed",
        target.conversation.id,
    )
    assert row.details["tool_use_id"] == "w1"
    blocks = [
        b for r in target.conversation.read_all() for b in r["content"] if b.get("type") == "shadow_intent"
    ]
    assert [b["name"] for b in blocks] == ["web_fetch"]


def test_the_todos_ledger_reaches_the_next_steps_session_block(bench):
    target = bench.target("alice")
    plan = {"plan": {"goal": "Clean the survey data", "done": ["no null ages"], "loop": {"maxSteps": 5}}}
    _, model = run_turn(
        bench, target, Reply(calls=(Call(name="todos", input=plan, id="t1"),)), Reply(text="ok")
    )
    first, second = (r.system_dynamic for r in model.requests)
    assert "Clean the survey data" not in first
    assert "Clean the survey data" in second
    assert "no null ages" in second
    # The goal's maxSteps lowered the turn's ceiling from the next step on.
    assert second.rstrip().endswith("Steps: 2/5\n</session>")


def test_compaction_is_reapplied_on_the_next_turn(bench):
    target = bench.target("alice")
    # A tool result to compact: read_tool_result answers about an unknown id.
    probe = Call(name="read_tool_result", input={"id": "nothing-here"}, id="p1")
    run_turn(bench, target, Reply(calls=(probe,)), Reply(text="seen"), message="look")
    compact = {"actions": [{"target": {"tool_use_id": "p1"}, "action": "remove"}], "reason": "noise"}
    run_turn(
        bench, target, Reply(calls=(Call(name="compact_history", input=compact, id="c1"),)), Reply(text="ok")
    )
    jsonl = (target.conversation.path / "messages.jsonl").read_bytes()
    _, model = run_turn(bench, target, Reply(text="fine"), message="again")
    shown = {
        b["tool_use_id"]: b["content"]
        for m in model.requests[0].messages
        for b in m["content"]
        if b["type"] == "tool_result"
    }
    assert shown["p1"].startswith("[removed by compact_history:")
    assert (target.conversation.path / "messages.jsonl").read_bytes().startswith(jsonl)


def test_turns_of_one_conversation_on_two_event_loops_take_turns(bench):
    """A kernel's subshells run turns on their own threads' loops: one conversation still runs one turn
    at a time."""
    import threading

    target = bench.target("alice")
    events: list[str] = []
    inside = threading.Event()

    def slow(name):
        def reply(request):
            events.append(f"in:{name}")
            inside.set()
            threading.Event().wait(0.3)  # the model takes a while; the other turn must not start meanwhile
            events.append(f"out:{name}")
            return Reply(text=name)

        return reply

    def run_in_own_loop(name):
        model = ScriptedModel([slow(name)])

        async def go():
            async with bench.turn(target, f"hello from {name}", model=model) as request:
                await bench.runtime.run(request)

        asyncio.run(go())

    first = threading.Thread(target=run_in_own_loop, args=("a",))
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=run_in_own_loop, args=("b",))
    second.start()
    first.join(20)
    second.join(20)
    assert events == ["in:a", "out:a", "in:b", "out:b"]
    users = [r for r in target.conversation.read_all() if r["role"] == "user"]
    assert len(users) == 2
