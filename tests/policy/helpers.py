"""Shared pieces for policy tests: a real store, scripted turns, and approvers that record what they saw."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from neuralis_jupyter.policy import ApproverAnswer, PolicyEngine
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, StopSignal, ToolContext, TurnRequest
from neuralis_jupyter.runtime.results import ResultStore
from neuralis_jupyter.runtime.tools import Tool, ToolOutput, ToolRegistry
from neuralis_jupyter.store import Store
from neuralis_jupyter.store.interactions import PendingInteraction
from tests.runtime.helpers import OBJ, session

__all__ = ["OBJ", "RecordingApprover", "make_tool", "run_turn", "session", "tool_results", "write_calls"]


class RecordingApprover:
    """Answers every ask the same way (``None``: leave it pending); ``before`` runs first (to tamper)."""

    def __init__(
        self,
        approve: bool | None = True,
        *,
        by: str = "alice",
        before: Callable[[PendingInteraction], Awaitable[None]] | None = None,
        delay: float = 0.0,
    ) -> None:
        self.approve = approve
        self.by = by
        self.before = before
        self.delay = delay
        self.asked: list[PendingInteraction] = []

    async def ask(self, interaction: PendingInteraction) -> ApproverAnswer | None:
        self.asked.append(interaction)
        if self.before is not None:
            await self.before(interaction)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.approve is None:
            return None
        return ApproverAnswer(approve=self.approve, by=self.by, reason=None if self.approve else "no thanks")


def make_tool(
    name: str,
    *,
    access: str = "read",
    effects: frozenset[str] = frozenset(),
    package_id: str = "agent-core",
    requires: tuple[str, ...] | None = None,
    intrinsic: bool = False,
    calls: list[tuple[str, dict[str, Any]]] | None = None,
    on_run: Callable[[dict[str, Any], Any], Awaitable[None]] | None = None,
    schema: dict[str, Any] | None = None,
) -> Tool:
    from neuralis_jupyter.contracts import Requires

    async def handler(args: dict[str, Any], ctx: Any) -> ToolOutput:
        if calls is not None:
            calls.append((name, args))
        if on_run is not None:
            await on_run(args, ctx)
        return ToolOutput(content=f"{name} ran with {sorted(args.items())}")

    return Tool(
        name=name,
        description=f"the {name} tool",
        input_schema=schema or OBJ,
        handler=handler,
        access=access,  # type: ignore[arg-type]
        effects=effects,
        package_id=package_id,
        requires=None if requires is None else Requires(features=requires),
        intrinsic=intrinsic,
    )


def write_calls(*inputs: dict[str, Any], name: str = "write_note") -> list[Reply]:
    """One step per input, each a single sequential call of ``name``; then a closing text reply."""
    steps = [Reply(calls=(Call(name=name, input=i, id=f"t{n}"),)) for n, i in enumerate(inputs, 1)]
    return [*steps, Reply(text="done")]


def run_turn(
    store: Store,
    conv: Any,
    engine: PolicyEngine,
    tools: list[Tool],
    replies: list[Reply],
    *,
    who: Any = None,
    request_id: str | None = None,
) -> Any:
    model = ScriptedModel(replies)
    req = TurnRequest(
        session=who or session(request_id=request_id),
        conversation=conv,
        model=model,
        tools=ToolRegistry.of(tools),
        message="go",
        policy=engine,
        permission=engine,
    )
    settled = asyncio.run(AgentRuntime(store).run(req))
    model.assert_complete()
    return settled


def tool_results(conv: Any) -> dict[str, dict[str, Any]]:
    return {b["tool_use_id"]: b for r in conv.read_all() if r["role"] == "tool" for b in r["content"]}


def context_factory(store: Store, conv: Any) -> Callable[[Tool, Any], ToolContext]:
    """A ToolContext factory for out-of-band replays, built from real runtime parts."""

    def build(tool: Tool, who: Any) -> ToolContext:
        req = TurnRequest(
            session=who, conversation=conv, model=ScriptedModel(), tools=ToolRegistry.of([tool])
        )
        return ToolContext(
            session=who,
            request=req,
            runtime=AgentRuntime(store),
            results=ResultStore(conv.path),
            step=0,
            emit=lambda _e: None,
            stop=StopSignal(),
            turn_state={},
        )

    return build
