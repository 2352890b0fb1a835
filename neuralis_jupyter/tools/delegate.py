"""``delegate``: hand a task to a sub-agent with its own loop (seed 000, "The seven base subagents").

The agent is resolved among the caller-visible package agents (``general`` when none is named). The
child's catalog is the widest set a child may get (:func:`child_registry`: the parent's read-only and
intrinsic tools within the parent's scope), minus tools barred from every sub-agent and ``delegate``
itself at the depth limit. A persona's ``allowed-tools`` is a CEILING the call's ``tools`` is intersected
with; ``blocked_tools`` removes names. Every requested name that falls out is named back with the
reason, in the same words whether the tool is hidden from the caller or invented, and a ``tools`` list
of which nothing survives is refused before anything is written.

``background: true`` detaches the run (:class:`~neuralis_jupyter.runtime.inbox.BackgroundDelegates`,
``env.services["delegates"]``): the call answers at once, the run reports to this conversation when it
ends, and it has its own inbox, so a message sent to it later (the kernel's ``%inbox``, the server's
inbox route) continues it and it reports again. Each report is a ``delegate_report`` row stamped with
the run's turn number, and then a follow-up turn of this conversation, through the host's
``env.services["continue"]``, unless a ``wait`` in this conversation already handed that report to the
model (``env.services["seen_reports"]``, checked once the conversation is free).
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from traitlets import Integer, TraitError, validate
from traitlets.config import Configurable

from ..contracts import refusals
from ..contracts.identity import SessionContext
from ..packages import render_placeholders
from ..runtime import StaticPrompt, ToolContext, ToolOutput, ToolRegistry
from ..runtime.events import BackgroundReport
from ..runtime.inbox import BackgroundDelegates, DetachedRun, RunReport
from ..runtime.subagents import ChildRun, child_conversation, child_registry, resume_child, run_child
from .environment import ToolEnvironment

__all__ = ["REASONS", "DelegateSettings", "Narrowing", "handlers", "narrow"]

log = logging.getLogger(__name__)

Reason = Literal["not_in_catalog", "barred", "outside_persona", "blocked", "depth_limit"]
#: The words each reason is named back with.
REASONS: dict[Reason, str] = {
    "not_in_catalog": "not in the child's catalog",
    "barred": "barred from every subagent",
    "outside_persona": "outside the persona's list",
    "blocked": "removed by the call's own blocked_tools",
    "depth_limit": "delegate at the depth limit",
}
DEFAULT_AGENT = "general"


class DelegateSettings(Configurable):
    max_depth = Integer(
        2,
        help="How deep sub-agents may nest: 1 lets a turn delegate but not its children; 2 one level more.",
    ).tag(config=True)

    max_background = Integer(
        4, help="The most background sub-agent runs one process keeps going at once."
    ).tag(config=True)

    inbox_limit = Integer(
        20,
        help=(
            "The most messages that may wait, undelivered, in one background sub-agent run's inbox; "
            "one more is refused with inbox_full."
        ),
    ).tag(config=True)

    inbox_rate_limit = Integer(
        30,
        help=(
            "The most messages one sender may send to the inboxes of this process's background "
            "sub-agent runs in a minute; one more is refused with inbox_rate_limited. (The seed's other "
            "brake, inbox_hops_exceeded, bounds chains of agents messaging agents: only users send to "
            "a run's inbox, so it does not apply.)"
        ),
    ).tag(config=True)

    @validate("max_depth", "max_background", "inbox_limit", "inbox_rate_limit")
    def _positive(self, proposal: dict[str, Any]) -> int:
        if proposal["value"] < 1:
            raise TraitError(f"{proposal['trait'].name} must be at least 1, got {proposal['value']!r}")
        return proposal["value"]


_PREFIX = re.compile(r"^(?:functions|tools|tool)[.:/]")


def normalize(name: str) -> str:
    """The same normalisation for ``tools`` and ``blocked_tools``: a denylist must never miss.
    Case folds first, so a wire prefix in any case (``Functions.``) is stripped too."""
    return _PREFIX.sub("", name.strip().lower()).strip()


@dataclass(frozen=True, kw_only=True)
class Narrowing:
    tools: ToolRegistry
    removed: tuple[tuple[str, Reason], ...] = ()

    def named_back(self) -> list[str]:
        return [f"{name}: {REASONS[reason]}" for name, reason in self.removed]


def narrow(
    *,
    parent: ToolRegistry,
    catalog: ToolRegistry,
    persona_tools: tuple[str, ...] | None,
    requested: Iterable[str] | None,
    blocked: Iterable[str],
    at_depth_limit: bool,
) -> Narrowing:
    """The child's tools and the requested names that fell out, with why."""
    by_norm = {normalize(t.name): t for t in catalog}
    barred = {normalize(t.name) for t in parent if t.barred_from_subagents}
    ceiling = None if persona_tools is None else {normalize(n) for n in persona_tools}
    blocked_norm = {normalize(n): n for n in blocked}
    removed: list[tuple[str, Reason]] = []

    def why(norm: str) -> Reason | None:
        if norm in barred:
            return "barred"
        if norm == "delegate" and at_depth_limit:
            return "depth_limit"
        if norm not in by_norm:
            return "not_in_catalog"
        if ceiling is not None and norm not in ceiling:
            return "outside_persona"
        if norm in blocked_norm:
            return "blocked"
        return None

    if requested is None:
        candidates = list(by_norm)
    else:
        candidates = []
        for name in requested:
            norm = normalize(name)
            reason = why(norm)
            if reason is None:
                candidates.append(norm)
            else:
                removed.append((name, reason))
    # An unmatched blocked name is named back too: a denylist that silently blocks nothing hands MORE.
    for norm, name in blocked_norm.items():
        if norm not in by_norm and norm not in barred:
            removed.append((name, "not_in_catalog"))
    keep = {n for n in candidates if why(n) is None}
    return Narrowing(tools=catalog.filter(lambda t: normalize(t.name) in keep), removed=tuple(removed))


def _summary(run: ChildRun, narrowing: Narrowing) -> str:
    lines = [run.settled.text or f"(the {run.agent} sub-agent ended without a summary)"]
    if run.settled.status != "completed":
        lines.append(
            f"[The sub-agent settled {run.settled.status}: {run.settled.reason or ''}]".rstrip(": ]") + "]"
        )
    lines.append(f"[Transcript: {run.transcript_path} · run {run.run_id} · {run.settled.steps} steps]")
    if narrowing.removed:
        lines.append("[Not given to the sub-agent: " + "; ".join(narrowing.named_back()) + "]")
    return "\n".join(lines)


def _manager(settings: DelegateSettings) -> BackgroundDelegates:
    return BackgroundDelegates(
        limit=settings.max_background,
        inbox_limit=settings.inbox_limit,
        rate_limit=settings.inbox_rate_limit,
    )


def handlers(env: ToolEnvironment) -> dict[str, Any]:
    settings = DelegateSettings(config=env.config)
    # Built with the handlers, so the server's inbox route finds it before any run has started.
    env.services.setdefault("delegates", _manager(settings))

    async def delegate(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        session: SessionContext = ctx.session
        wanted = args.get("agent") or DEFAULT_AGENT
        persona = next((a for a in env.packages.agents(session) if a.name == wanted), None)
        if persona is None:
            names = ", ".join(sorted(a.name for a in env.packages.agents(session))) or "none"
            return ToolOutput(
                content=f"No agent named {wanted!r} among yours ({names}).", is_error=True, outcome="error"
            )
        depth = ctx.request.depth + 1
        if depth > settings.max_depth:
            return ToolOutput(
                content=refusals.envelope_refusal(
                    "delegate", f"sub-agents may nest only {settings.max_depth} deep"
                ),
                is_error=True,
                outcome="refused",
            )
        catalog = child_registry(ctx.request.tools, ctx.request.envelope)
        narrowing = narrow(
            parent=ctx.request.tools,
            catalog=catalog,
            persona_tools=persona.allowed_tools,
            requested=args.get("tools"),
            blocked=args.get("blocked_tools", ()),
            at_depth_limit=depth >= settings.max_depth,
        )
        if args.get("tools") is not None and not len(narrowing.tools):
            return ToolOutput(
                content="Refused: none of the requested tools can be given to the sub-agent ("
                + "; ".join(narrowing.named_back())
                + "). Nothing was started.",
                is_error=True,
                outcome="refused",
            )
        prompt = StaticPrompt(text=render_placeholders(persona.body, session))
        run_id = "d-" + uuid.uuid4().hex[:12]
        background = bool(args.get("background"))

        def child() -> Any:
            return run_child(
                ctx,
                task=args["task"],
                agent=persona.name,
                tools=narrowing.tools,
                prompt=prompt,
                max_steps=args.get("max_steps"),
                mode="background" if background else "foreground",
                run_id=run_id,
            )

        if not background:
            run = await child()
            failed = run.settled.status in ("failed", "refused")
            return ToolOutput(
                content=_summary(run, narrowing),
                is_error=failed,
                outcome="error" if failed else "ok",
                data={
                    "run_id": run.run_id,
                    "agent": run.agent,
                    "status": run.settled.status,
                    "transcript": str(run.transcript_path),
                    "removed": [list(r) for r in narrowing.removed],
                },
            )

        parent = ctx.request.conversation
        last: ChildRun | None = None

        async def settled_text(turn: Awaitable[ChildRun]) -> str:
            nonlocal last
            try:
                last = await turn
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the parent still learns it failed: a report is owed either way
                log.exception("background sub-agent %s failed", run_id)
                return f"The {persona.name} sub-agent (run {run_id}) failed: {type(exc).__name__}: {exc}"
            return _summary(last, narrowing)

        async def resume(sender: SessionContext) -> str:
            if last is None:
                return (
                    f"The {persona.name} sub-agent (run {run_id}) cannot take messages: its first turn "
                    "failed before it started. Delegate the task again."
                )
            return await settled_text(resume_child(last, runtime=ctx.runtime, session=sender))

        async def report(done: RunReport) -> None:
            block: dict[str, Any] = {
                "type": "delegate_report",
                "run_id": run_id,
                "turn": done.turn,
                "text": done.text,
            }
            if done.inbox_ids:
                block["inbox_ids"] = list(done.inbox_ids)
            await asyncio.to_thread(parent.append, {"role": "event", "content": [block]})

        async def follow_up(done: RunReport) -> None:
            cont = env.services.get("continue")
            if cont is None:
                return
            # The parent continues as whoever this turn answered: the starter, or the sender.
            as_ = (
                session
                if done.sender is None
                else done.sender.replace(
                    agent_id=session.agent_id,
                    conversation_id=parent.id,
                    request_id=None,
                    tool_use_id=None,
                    delegate_run_id=session.delegate_run_id,
                    delegate_mode=session.delegate_mode,
                )
            )

            def owed() -> bool:
                seen = env.services.get("seen_reports")
                return seen is None or not seen.seen(parent.id, run_id, done.turn)

            event = BackgroundReport(shell_id=run_id, exit_code=None, text=done.text)
            await cont(as_, parent, event, owed=owed)

        runs: BackgroundDelegates | None = env.services.get("delegates")
        if runs is None:  # a host that swapped the services out after the handlers were built
            runs = env.services["delegates"] = _manager(settings)
        meta = await asyncio.to_thread(parent.read_meta)
        detached = DetachedRun(
            run_id=run_id,
            conversation=child_conversation(parent, run_id),
            project_id=session.project_id,
            parent_owner=meta["user_id"],
            first=lambda: settled_text(child()),
            resume=resume,
            report=report,
            follow_up=follow_up,
        )
        try:
            runs.start(detached)
        except RuntimeError as exc:
            return ToolOutput(content=str(exc), is_error=True, outcome="refused")
        transcript = ctx.request.conversation.path / "delegates" / run_id / "messages.jsonl"
        text = (
            f"Started the {persona.name} sub-agent in the background as run {run_id}; its report arrives "
            "in this conversation when it ends. A message sent to its inbox (in a notebook: "
            f"%inbox {run_id} TEXT) continues it, and it reports again. Transcript: {transcript}"
        )
        if narrowing.removed:
            text += "\n[Not given to the sub-agent: " + "; ".join(narrowing.named_back()) + "]"
        return ToolOutput(
            content=text,
            data={
                "run_id": run_id,
                "agent": persona.name,
                "status": "running",
                "transcript": str(transcript),
            },
        )

    return {"delegate": delegate}
