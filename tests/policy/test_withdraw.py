"""A stop while an approval waits withdraws the ask: it is expired, and no later approval can run it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from neuralis_jupyter.policy import InteractionAlreadyResolved, PolicyEngine, ReplayRefused
from neuralis_jupyter.providers.scripted import ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, StopSignal, ToolRegistry, TurnRequest
from neuralis_jupyter.store.interactions import PendingInteraction

from .helpers import context_factory, make_tool, session, tool_results, write_calls


class WaitingApprover:
    """Never answers; says when it has been asked."""

    def __init__(self) -> None:
        self.asked: list[PendingInteraction] = []
        self.waiting = asyncio.Event()

    async def ask(self, interaction: PendingInteraction) -> None:
        self.asked.append(interaction)
        self.waiting.set()
        await asyncio.Event().wait()


def test_a_stop_while_an_approval_waits_expires_it(store, conv):
    calls: list[Any] = []
    tools = ToolRegistry.of([make_tool("write_note", access="write", calls=calls)])
    stop = StopSignal()

    async def go() -> tuple[Any, WaitingApprover, PolicyEngine]:
        approver = WaitingApprover()
        engine = PolicyEngine(store, guard="safe", approver=approver, approval_timeout=60)
        req = TurnRequest(
            session=session(),
            conversation=conv,
            model=ScriptedModel(write_calls({"text": "hi"})[:1]),
            tools=tools,
            message="go",
            policy=engine,
            permission=engine,
            stop=stop,
        )
        turn = asyncio.create_task(AgentRuntime(store).run(req))
        await asyncio.wait_for(approver.waiting.wait(), timeout=10)
        stop.set("the user pressed stop")
        return await asyncio.wait_for(turn, timeout=10), approver, engine

    settled, approver, engine = asyncio.run(go())
    assert settled.status == "stopped"
    assert tool_results(conv)["t1"]["outcome"] == "stopped"
    [asked] = approver.asked
    record = store.interactions.get(asked.id)
    assert (record.status, record.reason) == (
        "expired",
        "the turn was stopped while the call waited for approval",
    )
    assert store.interactions.list_pending("default") == []
    [expired] = store.audit.list("default", action="interaction.expired")
    assert expired.details["interaction_id"] == asked.id

    with pytest.raises(InteractionAlreadyResolved):
        asyncio.run(engine.resolve(asked.id, approve=True, by=session()))
    with pytest.raises(ReplayRefused, match="expired, not approved"):
        asyncio.run(engine.replay(asked.id, tools=tools, runner=context_factory(store, conv)))
    assert calls == []
