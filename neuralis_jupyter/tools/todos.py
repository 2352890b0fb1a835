"""``todos``: the session working-state tool, its prompt section, its step ceiling and the user's side.

The ledger model is :mod:`.ledger`; this module persists it in ``meta.json["session_ledger"]`` through
:meth:`Conversation.update_meta` (read, change and atomic replace under the conversation's lock, in a
worker thread), so it is durable, survives a restart and is shared by everyone in the conversation. A
call whose first step is refused writes nothing at all.

Keys of one call apply plan, then mark, whatever order they arrive in. With ``close``, mark and close
end the current cycle first and plan opens the next (nothing open: the close is skipped and named). A
refused step stops the call and the answer names what already landed.

The host wires three things: :func:`handlers` (the tool), :func:`session_section` (the ledger's lines in
the per-step ``<session>`` block) and :func:`step_ceiling` (``TurnRequest.step_ceiling``: the goal's
``loop.maxSteps`` folded into the running turn's step ceiling before every step). The Goal & loop dialog
calls :func:`set_goal_by_user`, :func:`achieve`, :func:`clear` and :func:`read_ledger`; they do blocking
file I/O, so async callers run them in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from traitlets import Integer, TraitError, validate
from traitlets.config import Configurable

from ..contracts.identity import SessionContext
from ..runtime import ToolContext, ToolOutput
from ..store.conversations import Conversation, utcnow_iso
from .environment import ToolEnvironment
from .ledger import (
    ArchiveEntry,
    Evolve,
    Loop,
    Outcome,
    Refused,
    SessionLedger,
    SetBy,
    close,
    complete,
    is_open,
    ledger_from,
    mark,
    new_goal,
    plan,
    render_session,
)

__all__ = [
    "LEDGER_KEY",
    "CallResult",
    "TodosSettings",
    "achieve",
    "apply_call",
    "clear",
    "handlers",
    "read_ledger",
    "session_section",
    "set_goal_by_user",
    "step_ceiling",
]

log = logging.getLogger(__name__)

LEDGER_KEY = "session_ledger"
DEFAULT_ARCHIVE_MAX_ENTRIES = 20


class TodosSettings(Configurable):
    archive_max_entries = Integer(
        DEFAULT_ARCHIVE_MAX_ENTRIES,
        help="How many closed cycles (v1, v2, ...) a conversation's session ledger keeps; oldest go first.",
    ).tag(config=True)

    @validate("archive_max_entries")
    def _positive(self, proposal: dict[str, Any]) -> int:
        if proposal["value"] < 1:
            raise TraitError(f"archive_max_entries must be at least 1, got {proposal['value']!r}")
        return proposal["value"]


@dataclass(frozen=True, kw_only=True)
class CallResult:
    """One todos call applied to a ledger: the new state, each step that landed, and the refusal that
    stopped the call (``None`` when every step landed)."""

    ledger: SessionLedger
    landed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    refusal: str | None = None

    def answer(self) -> str:
        lines = list(self.notes)
        if self.refusal is not None:
            lines.append(self.refusal)
            lines.append(
                "Already landed: " + "; ".join(self.landed) if self.landed else "Nothing was written."
            )
        body = render_session(self.ledger) or "No goal or todo list is open."
        return "\n".join([*lines, "", body]) if lines else body


def apply_call(
    ledger: SessionLedger, args: Mapping[str, Any], *, closed_at: str, max_entries: int
) -> CallResult:
    """Apply one todos call's keys in the seed's order; pure (persistence is the caller's)."""
    outcome = args.get("close")
    order = ("mark", "close", "plan") if outcome else ("plan", "mark")
    state, landed, notes = ledger, [], []
    for key in order:
        if key != "close" and key not in args:
            continue
        try:
            if key == "plan":
                state, words = plan(state, args["plan"])
            elif key == "mark":
                state, words = mark(state, args["mark"])
                if is_open(state) and complete(state):  # the tick that meets the last condition
                    state, entry = close(
                        state, "achieved", by="agent", closed_at=closed_at, max_entries=max_entries
                    )
                    assert entry is not None
                    notes.append(f"archived as v{entry['version']}")
                    words += f" → archived as v{entry['version']}"
            else:
                state, entry = close(state, outcome, by="agent", closed_at=closed_at, max_entries=max_entries)
                if entry is None:
                    words = "close skipped (nothing was open)"
                    notes.append("close skipped: nothing was open")
                else:
                    words = f"close (archived as v{entry['version']}, {outcome})"
                    notes.append(f"archived as v{entry['version']}")
        except Refused as exc:
            label = f"close {outcome}" if key == "close" else key
            refusal = f"{label} refused: {exc}"
            return CallResult(ledger=state, landed=tuple(landed), notes=tuple(notes), refusal=refusal)
        landed.append(words)
    return CallResult(ledger=state, landed=tuple(landed), notes=tuple(notes))


# -- persistence -----------------------------------------------------------------------------------------


class _Unchanged(Exception):
    """Raised inside ``update_meta`` to leave meta.json untouched."""


def read_ledger(conversation: Conversation) -> SessionLedger:
    """The conversation's ledger (empty when it has none). Blocking."""
    meta = cast(dict[str, Any], conversation.read_meta())
    return ledger_from(meta.get(LEDGER_KEY))


def update_ledger(
    conversation: Conversation, change: Callable[[SessionLedger], SessionLedger]
) -> SessionLedger:
    """Apply ``change`` under the conversation's lock and store the result; an unchanged ledger is not
    written. Blocking."""
    result: list[SessionLedger] = []

    def edit(meta: Any) -> None:
        before = ledger_from(meta.get(LEDGER_KEY))
        after = change(ledger_from(before))
        result.append(after)
        if after == before:
            raise _Unchanged
        meta[LEDGER_KEY] = after

    with contextlib.suppress(_Unchanged):
        conversation.update_meta(edit)
    return result[0]


# -- host wiring -----------------------------------------------------------------------------------------


def handlers(env: ToolEnvironment) -> dict[str, Any]:
    settings = TodosSettings(config=env.config)

    async def todos(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        results: list[CallResult] = []

        def change(ledger: SessionLedger) -> SessionLedger:
            results.append(
                apply_call(ledger, args, closed_at=utcnow_iso(), max_entries=settings.archive_max_entries)
            )
            return results[-1].ledger

        await asyncio.to_thread(update_ledger, ctx.request.conversation, change)
        result = results[-1]
        if result.refusal is not None:
            log.info("todos call %s refused: %s", ctx.session.tool_use_id, result.refusal)
        return ToolOutput(
            content=result.answer(),
            is_error=result.refusal is not None,
            outcome="ok" if result.refusal is None else "error",
            data={"ledger": result.ledger, "landed": list(result.landed)},
        )

    return {"todos": todos}


def session_section(
    conversation: Conversation,
) -> Callable[[SessionContext, int, int | None], Awaitable[str]]:
    """An :class:`~neuralis_jupyter.prompt.AssembledPrompt` section: the ledger, read fresh every step
    (another process, the user's Goal & loop dialog, may have changed it)."""

    async def section(session: SessionContext, step: int, max_steps: int | None) -> str:
        return render_session(await asyncio.to_thread(read_ledger, conversation))

    return section


def step_ceiling(conversation: Conversation) -> Callable[[], Awaitable[int | None]]:
    """The runtime seam ``TurnRequest.step_ceiling``: awaited before every step, it answers the open
    goal's ``loop.maxSteps`` (``None``: no bound). The runtime lowers the turn's ceiling to it, never
    raises it, so a bound lowered by a todos call binds from the next step of the same turn."""

    async def ceiling() -> int | None:
        goal = (await asyncio.to_thread(read_ledger, conversation))["goal"]
        return goal["loop"].get("maxSteps") if goal is not None else None

    return ceiling


# -- the user's side (the composer's Goal & loop dialog, a workflow's seeded goal) ------------------------


def set_goal_by_user(
    conversation: Conversation,
    *,
    text: str,
    done: Sequence[str] = (),
    loop: Loop | None = None,
    set_by: SetBy = "user",
    evolve: Evolve | None = None,
) -> SessionLedger:
    """Set (or replace) the open goal as the user or a workflow: locked for the agent unless
    ``evolve="agent"``. Conditions whose text stays keep their met state; the todo list stays. Blocking."""
    if set_by not in ("user", "workflow"):
        raise ValueError(f"set_by must be 'user' or 'workflow', got {set_by!r}")
    if evolve not in (None, "agent"):
        raise ValueError(f"evolve must be None or 'agent', got {evolve!r}")

    def change(ledger: SessionLedger) -> SessionLedger:
        met = {c["text"]: c["met"] for c in ledger["goal"]["done"]} if ledger["goal"] else {}
        goal = new_goal(text, list(done), loop, set_by=set_by, evolve=evolve)
        for condition in goal["done"]:
            condition["met"] = met.get(condition["text"], False)
        ledger["goal"] = goal
        return ledger

    return update_ledger(conversation, change)


def _close_by_user(conversation: Conversation, outcome: Outcome, max_entries: int) -> ArchiveEntry | None:
    entries: list[ArchiveEntry | None] = []

    def change(ledger: SessionLedger) -> SessionLedger:
        ledger, entry = close(ledger, outcome, by="user", closed_at=utcnow_iso(), max_entries=max_entries)
        entries.append(entry)
        return ledger

    update_ledger(conversation, change)
    return entries[0]


def achieve(
    conversation: Conversation, *, max_entries: int = DEFAULT_ARCHIVE_MAX_ENTRIES
) -> ArchiveEntry | None:
    """The user's Achieve: archive the open cycle as achieved; ``None`` when nothing is open. Blocking."""
    return _close_by_user(conversation, "achieved", max_entries)


def clear(
    conversation: Conversation, *, max_entries: int = DEFAULT_ARCHIVE_MAX_ENTRIES
) -> ArchiveEntry | None:
    """The user's Clear: archive the open cycle as cleared, whoever set it; ``None`` when nothing is open."""
    return _close_by_user(conversation, "cleared", max_entries)
