"""What a turn is asked to do, and what a tool handler can see of it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..contracts.envelope import Envelope
from ..contracts.identity import SessionContext
from ..providers.base import Model, UsageEvent
from ..store.conversations import Conversation
from .handoff import ConversationHandoff, HandoffPublisher
from .permission import PermissionHook, ToolPolicy
from .tools import ToolRegistry
from .transcript import HistoryTransform

if TYPE_CHECKING:
    from .events import RuntimeEvent
    from .loop import AgentRuntime
    from .results import ResultStore

__all__ = [
    "LIVE",
    "ExecutionMode",
    "PromptBuilder",
    "StaticPrompt",
    "StopSignal",
    "ToolContext",
    "ToolTape",
    "TurnRequest",
]

log = logging.getLogger(__name__)
#: The longest a failing stop poll waits before it tries again.
_MAX_POLL_BACKOFF = 5.0


@dataclass(frozen=True, kw_only=True)
class ExecutionMode:
    """``live`` runs tools; ``shadow`` performs no effects: only attested first-party reads and
    intrinsic tools run, everything else is captured as an intent (seed 001, item 7)."""

    kind: Literal["live", "shadow"] = "live"


LIVE = ExecutionMode()
SHADOW = ExecutionMode(kind="shadow")


class PromptBuilder(Protocol):
    def static(self, session: SessionContext) -> str:
        """The system prompt's byte-stable part, built once per turn in a worker thread (so it may read
        files)."""
        ...

    async def dynamic(self, session: SessionContext, *, step: int, max_steps: int | None) -> str:
        """The per-step session block."""
        ...


@dataclass(frozen=True, kw_only=True)
class StaticPrompt:
    text: str = "You are a helpful research assistant working inside a Jupyter notebook."

    def static(self, session: SessionContext) -> str:
        return self.text

    async def dynamic(self, session: SessionContext, *, step: int, max_steps: int | None) -> str:
        return f"<session>\nSteps: {step}/{max_steps if max_steps is not None else '∞'}\n</session>"


class StopSignal:
    """A stop for one turn: set in-process, or found by ``poll`` (a flag in the store, so a server
    route can stop a turn running in a kernel). ``poll`` is blocking I/O: it runs in a worker thread,
    every ``poll_interval`` seconds while the turn runs. Setting the stop cancels the work registered
    with :meth:`guard` (a streaming model call, the running tools)."""

    def __init__(self, poll: Callable[[], bool] | None = None, *, poll_interval: float = 0.25) -> None:
        self._event = asyncio.Event()
        self._poll = poll
        self._interval = poll_interval
        self._guarded: set[asyncio.Task[Any]] = set()
        self._stopped: set[asyncio.Task[Any]] = set()
        self.reason: str | None = None

    def set(self, reason: str = "stopped") -> None:
        self.reason = self.reason or reason
        self._event.set()
        for task in list(self._guarded):
            if task not in self._stopped:
                self._stopped.add(task)
                task.cancel()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def check(self) -> bool:
        """Whether the turn must stop, polling the store once if there is one."""
        if self._event.is_set():
            return True
        if self._poll is not None and await asyncio.to_thread(self._poll):
            self.set("stop requested")
            return True
        return False

    async def wait(self) -> None:
        await self._event.wait()

    async def watch(self) -> None:
        """Poll until a stop is found; the turn runs this as one background task.

        A poll that fails (the store is locked or gone) is logged and retried, backing off up to
        :data:`_MAX_POLL_BACKOFF` seconds, so a stop while the model streams or tools run is still seen
        once the store answers again; an in-process stop is seen at once throughout.
        """
        if self._poll is None:
            return
        delay = self._interval
        while True:
            try:
                if await self.check():
                    return
                delay = self._interval
            except Exception:
                delay = min(delay * 2, max(self._interval, _MAX_POLL_BACKOFF))
                log.warning("could not poll for a stop request; trying again in %.2f s", delay, exc_info=True)
            # Wakes at once on an in-process stop; otherwise polls again after the delay.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout=delay)

    async def guard(self, work: Coroutine[Any, Any, None]) -> bool:
        """Run ``work`` in the current task; True when a stop cancelled it, False when it finished.

        Like ``asyncio.timeout``: a stop cancels the current task, and the cancellation is taken back
        here (``uncancel``) unless someone else cancelled the task too.
        """
        task = asyncio.current_task()
        assert task is not None
        if self._event.is_set():
            work.close()
            return True
        self._guarded.add(task)
        try:
            await work
            return False
        except asyncio.CancelledError:
            if task in self._stopped and task.uncancel() == 0:
                return True
            raise
        finally:
            self._guarded.discard(task)
            self._stopped.discard(task)


class ToolTape(Protocol):
    """Cassette access to tool results: record them, or replay a non-deterministic tool's result."""

    def recorded_result(self, tool_use_id: str) -> dict[str, Any] | None: ...

    def record_result(self, tool_use_id: str, block: dict[str, Any]) -> None: ...


@dataclass(frozen=True, kw_only=True)
class TurnRequest:
    session: SessionContext
    conversation: Conversation
    model: Model
    tools: ToolRegistry
    #: The user's message; ``None`` continues the conversation from what is already in it.
    message: str | None = None
    envelope: Envelope = field(default_factory=Envelope)
    mode: ExecutionMode = LIVE
    prompt: PromptBuilder = field(default_factory=StaticPrompt)
    permission: PermissionHook | None = None
    policy: ToolPolicy | None = None
    stop: StopSignal | None = None
    tape: ToolTape | None = None
    #: Where a suspended turn's checkpoint goes; ``None`` reports the handoff as absent.
    handoff: HandoffPublisher | None = field(default_factory=ConversationHandoff)
    history: HistoryTransform | None = None
    #: Awaited before every step; a value below the turn's step ceiling lowers it (never raises it).
    step_ceiling: Callable[[], Awaitable[int | None]] | None = None
    #: Sub-agent nesting depth; 0 for a top-level turn.
    depth: int = 0
    max_tokens: int = 4096
    temperature: float | None = None


@dataclass(kw_only=True)
class ToolContext:
    """Handed to every tool handler. ``session.tool_use_id`` names the call."""

    session: SessionContext
    request: TurnRequest
    runtime: AgentRuntime
    results: ResultStore
    step: int
    emit: Callable[[RuntimeEvent], None]
    stop: StopSignal
    #: Per-turn scratch space tools share (e.g. staged skill credentials).
    turn_state: dict[str, Any]
    #: Charge a model call a tool makes for the turn (a native web search) to the turn's own usage:
    #: ``record_usage(provider, model, usage)``. Synchronous; never raises.
    record_usage: Callable[[str, str, UsageEvent], None] | None = None
