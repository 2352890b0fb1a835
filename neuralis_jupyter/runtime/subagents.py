"""Sub-agent runs: children shrink, never escape (seed 001, item 4).

A child's registry is the parent's read-only tools that the parent's own envelope admits, plus the
intrinsic cognition tools (they are how an agent thinks, not workspace effects), minus anything barred
from every sub-agent. The parent's envelope binds the child verbatim; only the per-run budget counters
restart from zero. The execution mode binds the child like the envelope does, so a shadow run's child is
a shadow run too. The child's transcript is a conversation of its own under the parent's:
``<parent>/delegates/<run_id>/``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from ..contracts.envelope import Budgets, Envelope, authorize_tool_invocation
from ..providers.base import Model
from ..store.conversations import Conversation, ConversationMeta, utcnow_iso, write_json_atomic
from .context import PromptBuilder, StaticPrompt, StopSignal, ToolContext, TurnRequest
from .events import RuntimeEvent, TurnSettled
from .tools import Tool, ToolRegistry

__all__ = ["ChildRun", "SubagentEvent", "child_registry", "run_child"]


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

    @property
    def transcript_path(self) -> Path:
        return self.conversation.path / "messages.jsonl"


def open_child_conversation(parent: Conversation, *, run_id: str, agent: str, user_id: str) -> Conversation:
    path = parent.path / "delegates" / run_id
    path.mkdir(parents=True)
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
    return Conversation(path, conversation_id=run_id, root_id=parent.root_id or parent.id)


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
    import asyncio

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
    child_stop = StopSignal()
    parent_stop = ctx.stop
    # A background child outlives its parent's turn by design: only a foreground one follows its stop,
    # and only a foreground one reports its events into the parent's (still running) stream.
    background = mode == "background"

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
    tickets = ctx.runtime.store.tickets
    # The child's own stream scope, so session tickets minted for its shell calls verify.
    await asyncio.to_thread(tickets.open_stream, request.session)
    watcher = None if background else asyncio.create_task(follow_parent())
    forward = None if background else (lambda e: ctx.emit(SubagentEvent(run_id=run_id, agent=agent, event=e)))
    try:
        settled = await ctx.runtime.run(request, on_event=forward)
    finally:
        if watcher is not None:
            watcher.cancel()
        await asyncio.to_thread(tickets.end_stream, request.session.request_id)
    return ChildRun(run_id=run_id, agent=agent, conversation=conversation, settled=settled)
