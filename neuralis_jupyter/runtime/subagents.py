"""Sub-agent runs: children shrink, never escape (seed 001, item 4).

A child's registry is the parent's read-only tools that the parent's own envelope admits, plus the
intrinsic cognition tools (they are how an agent thinks, not workspace effects), minus anything barred
from every sub-agent. The parent's envelope binds the child verbatim; only the per-run budget counters
restart from zero. The execution mode binds the child like the envelope does, so a shadow run's child is
a shadow run too. The child's transcript is a conversation of its own under the parent's:
``<parent>/delegates/<run_id>/``. A background run can take more turns after its first one (an inbox
message, :mod:`.inbox`): :func:`resume_child` continues the same conversation with the same tools.

A foreground child stops with its parent's turn. A background child outlives that turn by design, so
it has its own stop: a stop request written to the store for the run's own conversation (its id is the
run id), which every turn of the run, the first and each inbox turn, polls like a host's turn polls
its conversation's (:func:`run_stop`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from ..contracts.envelope import Budgets, Envelope, authorize_tool_invocation
from ..contracts.identity import SessionContext
from ..providers.base import Model
from ..store.conversations import Conversation, ConversationMeta, utcnow_iso, write_json_atomic
from .context import PromptBuilder, StaticPrompt, StopSignal, ToolContext, TurnRequest
from .events import RuntimeEvent, TurnSettled
from .loop import AgentRuntime, new_request_id
from .tools import Tool, ToolRegistry

__all__ = [
    "ChildRun",
    "SubagentEvent",
    "child_conversation",
    "child_registry",
    "resume_child",
    "run_child",
    "run_stop",
]


def child_registry(parent: ToolRegistry, envelope: Envelope) -> ToolRegistry:
    """The widest tool set a child of ``parent`` under ``envelope`` may ever get."""

    def admitted(tool: Tool) -> bool:
        if tool.barred_from_subagents:
            return False
        if not authorize_tool_invocation(tool.facts, envelope).allowed:
            return False
        return tool.intrinsic or tool.access == "read"

    return parent.filter(admitted)


@dataclass(frozen=True, kw_only=True)
class SubagentEvent:
    """A child's event, forwarded to the parent's stream for a sub-agent card."""

    type: Literal["subagent"] = "subagent"
    run_id: str
    agent: str
    event: RuntimeEvent


@dataclass(frozen=True, kw_only=True)
class ChildRun:
    run_id: str
    agent: str
    conversation: Conversation
    settled: TurnSettled
    #: The turn as it was asked for; a later turn of the same run starts from it (:func:`resume_child`).
    request: TurnRequest

    @property
    def transcript_path(self) -> Path:
        return self.conversation.path / "messages.jsonl"


def child_conversation(parent: Conversation, run_id: str) -> Conversation:
    """The conversation of run ``run_id`` under ``parent`` (no I/O: it may not exist yet)."""
    return Conversation(
        parent.path / "delegates" / run_id, conversation_id=run_id, root_id=parent.root_id or parent.id
    )


def open_child_conversation(parent: Conversation, *, run_id: str, agent: str, user_id: str) -> Conversation:
    conversation = child_conversation(parent, run_id)
    path = conversation.path
    # The folder may exist already: a message to a background run's inbox can land before its first turn
    # starts. A run's meta.json is what must never be there yet (a run id used twice).
    path.mkdir(parents=True, exist_ok=True)
    if (path / "meta.json").exists():
        raise FileExistsError(f"sub-agent run {run_id!r} already exists under {parent.path}")
    meta = parent.read_meta()
    now = utcnow_iso()
    child_meta: ConversationMeta = {
        "id": run_id,
        "project_id": meta["project_id"],
        "agent_id": meta["agent_id"],
        "user_id": user_id,
        "created_at": now,
        "updated_at": now,
        "title": f"{agent} sub-agent",
        "root_id": parent.root_id or parent.id,
    }
    write_json_atomic(path / "meta.json", {**child_meta, "parent_id": parent.id, "delegate_agent": agent})
    (path / "messages.jsonl").touch()
    return conversation


async def run_child(
    ctx: ToolContext,
    *,
    task: str,
    agent: str,
    tools: ToolRegistry,
    prompt: PromptBuilder | None = None,
    model: Model | None = None,
    max_steps: int | None = None,
    mode: Literal["foreground", "background"] = "foreground",
    run_id: str | None = None,
) -> ChildRun:
    """Run a sub-agent to its end. ``tools`` must already be narrowed by the caller (delegate)."""
    parent = ctx.request
    ceiling = child_registry(parent.tools, parent.envelope)
    widened = [t.name for t in tools if t.name not in ceiling]
    if widened:
        raise ValueError(f"a child may not get tools its parent cannot hand down: {', '.join(widened)}")
    run_id = run_id or "d-" + uuid.uuid4().hex[:12]
    conversation = await asyncio.to_thread(
        open_child_conversation, parent.conversation, run_id=run_id, agent=agent, user_id=ctx.session.user_id
    )
    budgets = parent.envelope.budgets
    if max_steps is not None:
        ceiling = max_steps if budgets.max_steps is None else min(max_steps, budgets.max_steps)
        budgets = replace(budgets, max_steps=ceiling)
    # A background child outlives its parent's turn by design: only a foreground one follows its stop,
    # and only a foreground one reports its events into the parent's (still running) stream.
    background = mode == "background"
    parent_stop = ctx.stop
    child_stop = (
        run_stop(ctx.runtime, project_id=ctx.session.project_id, run_id=run_id)
        if background
        else StopSignal()
    )

    async def follow_parent() -> None:
        await parent_stop.wait()
        child_stop.set("the parent turn was stopped")

    session = ctx.session.replace(
        conversation_id=run_id,
        request_id=None,
        tool_use_id=None,
        delegate_run_id=run_id,
        delegate_mode=mode,
    )
    request = TurnRequest(
        session=session,
        conversation=conversation,
        model=model or parent.model,
        tools=tools,
        message=task,
        envelope=Envelope(scope=parent.envelope.scope, budgets=Budgets(**budgets.__dict__)),
        mode=parent.mode,
        prompt=prompt or StaticPrompt(),
        permission=parent.permission,
        policy=parent.policy,
        stop=child_stop,
        tape=parent.tape,
        depth=parent.depth + 1,
        max_tokens=parent.max_tokens,
        temperature=parent.temperature,
    )
    request = replace(request, session=session.replace(request_id=f"r-{run_id}"))
    watcher = None if background else asyncio.create_task(follow_parent())
    forward = None if background else (lambda e: ctx.emit(SubagentEvent(run_id=run_id, agent=agent, event=e)))
    try:
        settled = await _run_in_stream(ctx.runtime, request, forward)
    finally:
        if watcher is not None:
            watcher.cancel()
    return ChildRun(run_id=run_id, agent=agent, conversation=conversation, settled=settled, request=request)


async def resume_child(run: ChildRun, *, runtime: AgentRuntime, session: SessionContext) -> ChildRun:
    """One more turn of a background run's own conversation, from what is already in it (an inbox
    message appended by the caller), under ``session``'s identity bound to the run.

    The tools, prompt, envelope and mode are the first turn's: a later turn is never wider than the
    first, and a weaker ``session`` is narrower still where the policy checks its grants. The turn has
    its own request id and the run's own stop (:func:`run_stop`); like the first background turn it
    reports no events to a parent stream.
    """
    first = run.request
    bound = session.replace(
        agent_id=first.session.agent_id,
        conversation_id=run.run_id,
        request_id=new_request_id(),
        tool_use_id=None,
        delegate_run_id=run.run_id,
        delegate_mode="background",
    )
    stop = run_stop(runtime, project_id=first.session.project_id, run_id=run.run_id)
    request = replace(first, session=bound, message=None, stop=stop)
    settled = await _run_in_stream(runtime, request, None)
    return replace(run, settled=settled, request=request)


def run_stop(runtime: AgentRuntime, *, project_id: str, run_id: str) -> StopSignal:
    """A background run's turn's stop: set in process, or a stop request for the run's conversation
    written to the store after this moment (the seed's stop route, by the run's conversation id)."""
    since = datetime.now(UTC)
    stops = runtime.store.stops

    def requested() -> bool:
        return stops.requested(project_id=project_id, conversation_id=run_id, since=since)

    return StopSignal(poll=requested)


async def _run_in_stream(
    runtime: AgentRuntime, request: TurnRequest, on_event: Callable[[RuntimeEvent], None] | None
) -> TurnSettled:
    """Run a child turn inside its own stream scope, so session tickets minted for its shell calls
    verify, and end the scope (and every ticket) with the turn."""
    tickets = runtime.store.tickets
    await asyncio.to_thread(tickets.open_stream, request.session)
    try:
        return await runtime.run(request, on_event=on_event)
    finally:
        await asyncio.to_thread(tickets.end_stream, request.session.request_id)
