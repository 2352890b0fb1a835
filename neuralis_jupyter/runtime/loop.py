"""The agent loop: one turn of steps, each a model call and the tool calls it asked for.

The runtime is a library: a turn runs wherever it was asked for (a kernel cell, a server route, the
CLI). Every row is persisted as it happens; usage is priced per model partition and written after each
step; spend limits and the rate cap are checked before each model call; a stop is honoured between
steps, while the model streams and while tools run. A turn always ends with one :class:`TurnSettled`:
``completed``, ``suspended`` (a budget ran out; a handoff checkpoint is published), ``stopped``,
``refused`` (a limit, said in words) or ``failed`` (the provider failed, or anything else went wrong; the
error is logged and noted in the transcript). Only a :class:`CassetteMismatch` ends a turn without one: a
replay that diverged from its recording propagates, as itself, to whoever ran the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..contracts import refusals
from ..contracts.envelope import BudgetUse, budget_exhausted
from ..contracts.identity import assert_not_sentinel
from ..providers.base import ModelRequest, StopEvent, TextDelta, ToolUseEvent, UsageEvent
from ..providers.catalog import Catalog, load_catalog
from ..providers.errors import CassetteMismatch, ProviderError
from ..store import Store
from ..store.usage import UsageStore
from .context import StopSignal, ToolContext, TurnRequest
from .dispatch import run_tool_call
from .errors import TurnRefused
from .events import RateLimited, RuntimeEvent, StepStarted, TurnSettled, TurnStarted
from .events import TextDelta as TextEvent
from .handoff import publish_handoff
from .limits import RateLimiter, SpendGuard
from .meter import TurnMeter, utcnow
from .results import ResultStore, read_tool_result_tool
from .transcript import ToolRowWriter, TurnTranscript, history_messages
from .turn import Turn

__all__ = ["AgentRuntime"]

log = logging.getLogger(__name__)
_DONE = object()


def new_request_id() -> str:
    return "r-" + uuid.uuid4().hex[:16]


@dataclass(kw_only=True)
class _Step:
    text: list[str] = field(default_factory=list)
    calls: list[ToolUseEvent] = field(default_factory=list)
    #: The latest usage the provider reported: partial until the final one arrives.
    usage: UsageEvent | None = None
    stop: StopEvent | None = None
    stopped: bool = False
    duration_ms: int = 0


class AgentRuntime:
    """Runs turns. Holds only long-lived collaborators; every turn's state lives in the turn."""

    def __init__(
        self,
        store: Store,
        *,
        catalog: Catalog | None = None,
        max_steps: int = 50,
        rate_limiter: RateLimiter | None = None,
        spend_guard: SpendGuard | None = None,
    ) -> None:
        self.store = store
        self.catalog = catalog or load_catalog()
        self.max_steps = max_steps
        self._spend_guard = spend_guard
        self._rate_limiter = rate_limiter
        self._sql: tuple[UsageStore, SpendGuard, RateLimiter] | None = None

    async def _limits(self) -> tuple[UsageStore, SpendGuard, RateLimiter]:
        """The store-backed collaborators, built on first use in a worker thread (the first use of the
        store's SQL engine opens and migrates it)."""
        if self._sql is None:

            def build() -> tuple[UsageStore, SpendGuard, RateLimiter]:
                usage = self.store.usage
                spend = self._spend_guard or SpendGuard(usage)
                return usage, spend, self._rate_limiter or RateLimiter(self.store.calls)

            self._sql = await asyncio.to_thread(build)
        return self._sql

    # -- public -----------------------------------------------------------------------------------

    async def run_turn(self, request: TurnRequest) -> AsyncIterator[RuntimeEvent]:
        """Run one turn, yielding its events; the last one is always a :class:`TurnSettled`."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        task = asyncio.create_task(self._run(request, queue.put_nowait))
        task.add_done_callback(lambda _: queue.put_nowait(_DONE))
        try:
            while (item := await queue.get()) is not _DONE:
                yield item
            await task
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def run(
        self, request: TurnRequest, on_event: Callable[[RuntimeEvent], None] | None = None
    ) -> TurnSettled:
        """Run one turn to its end and return how it settled."""
        settled: TurnSettled | None = None
        async for event in self.run_turn(request):
            if on_event is not None:
                on_event(event)
            if isinstance(event, TurnSettled):
                settled = event
        assert settled is not None
        return settled

    # -- the turn ---------------------------------------------------------------------------------

    async def _run(self, req: TurnRequest, emit: Callable[[RuntimeEvent], None]) -> None:
        started = time.monotonic()
        conv = req.conversation
        session = assert_not_sentinel(req.session)
        session = session.replace(request_id=session.request_id or new_request_id(), conversation_id=conv.id)
        stop = req.stop or StopSignal()
        tools = req.tools
        if "read_tool_result" not in tools and req.depth == 0:
            # A top-level turn can always page its large results; a sub-agent gets exactly what it is
            # handed (its parent's delegate call may have removed it).
            tools = tools.with_intrinsic([read_tool_result_tool()])
        req = _replace(req, session=session, stop=stop, tools=tools)
        budget_steps = req.envelope.budgets.max_steps  # None: unbounded; 0 is a budget of no steps
        usage, _, _ = await self._limits()
        turn = Turn(
            req=req,
            emit=emit,
            transcript=TurnTranscript(conv),
            meter=TurnMeter(session=session, catalog=self.catalog, usage=usage, started=utcnow()),
            results=ResultStore(conv.path),
            max_steps=self.max_steps if budget_steps is None else min(budget_steps, self.max_steps),
            started=started,
        )
        watcher = asyncio.create_task(stop.watch())
        try:
            await self._turn(turn)
        except TurnRefused as exc:
            await turn.note("refused", str(exc))
            turn.settle("refused", reason=str(exc))
        except CassetteMismatch:
            raise
        except ProviderError as exc:
            log.warning("turn %s failed: %s", session.request_id, exc)
            await turn.note("failed", str(exc))
            turn.settle("failed", reason=str(exc))
        except Exception as exc:  # a bug or a broken disk: still one TurnSettled, and the error logged
            leaves = _leaves(exc)  # a step's tool calls fail together, as an ExceptionGroup
            if mismatch := next((e for e in leaves if isinstance(e, CassetteMismatch)), None):
                raise mismatch from None
            log.exception("turn %s failed", session.request_id)
            reason = "the turn failed: " + "; ".join(f"{type(e).__name__}: {e}" for e in leaves)
            await turn.note("failed", reason)
            turn.settle("failed", reason=reason)
        finally:
            watcher.cancel()
            try:
                await turn.meter.finish(duration_ms=turn.elapsed_ms())
            except Exception:
                log.exception("could not write the usage of turn %s", session.request_id)

    async def _turn(self, turn: Turn) -> None:
        req, session, stop = turn.req, turn.req.session, turn.stop
        if req.message is not None:
            user_row = {
                "role": "user",
                "content": [{"type": "text", "text": req.message}],
                "user_id": session.user_id,
                "request_id": session.request_id,
            }
            turn.user_seq = await asyncio.to_thread(req.conversation.append, user_row)
        await turn.transcript.load()
        turn.emit(
            TurnStarted(
                request_id=session.request_id or "",
                conversation_id=req.conversation.id,
                agent_id=session.agent_id,
                model=turn.model_ref,
                user_seq=turn.user_seq,
            )
        )
        # Byte-stable across the turn's steps; built once, off the loop (it may read identity files).
        static = await asyncio.to_thread(req.prompt.static, session)
        budgets = _replace(req.envelope.budgets, max_steps=turn.max_steps)
        _, spend_guard, rate_limiter = await self._limits()
        checks_spend = bool(spend_guard.rules(session))
        while True:
            if await stop.check():
                await turn.note("stopped", stop.reason or "stopped")
                turn.settle("stopped", reason=stop.reason)
                return
            if req.step_ceiling is not None:
                cap = await req.step_ceiling()
                if cap is not None and cap < turn.max_steps:
                    turn.max_steps = cap
                    budgets = _replace(budgets, max_steps=cap)
            used = BudgetUse(steps=turn.step, tokens=turn.meter.total_tokens, usd=turn.meter.total_usd)
            exhausted = budget_exhausted(budgets, used)
            if exhausted:
                fate = await publish_handoff(
                    req.conversation,
                    publisher=req.handoff,
                    session=session,
                    budget=exhausted,
                    used=used,
                    text=turn.last_text,
                )
                turn.settle(
                    "suspended", budget=exhausted, handoff=fate, reason=f"the {exhausted} budget ran out"
                )
                return
            if checks_spend:
                await turn.meter.flush()  # the turn's own spend must be in the store the check reads
                await asyncio.to_thread(spend_guard.check, session)
            await rate_limiter.acquire(
                session, on_wait=lambda d, rpm: turn.emit(RateLimited(wait_seconds=d, limit_rpm=rpm))
            )
            turn.step += 1
            turn.emit(StepStarted(step=turn.step, max_steps=turn.max_steps))
            rows = turn.transcript.rows()
            if req.history is not None:
                rows = req.history(rows)
            model_request = ModelRequest(
                model=req.model.model_id,
                system=static,
                system_dynamic=await req.prompt.dynamic(session, step=turn.step, max_steps=turn.max_steps),
                messages=tuple(history_messages(rows)),
                tools=req.tools.specs(),
                max_tokens=req.max_tokens,
                temperature=req.temperature,
            )
            result = await self._stream(turn, model_request)
            await self._record_step(turn, result)
            if result.stopped:
                await turn.note("stopped", stop.reason or "stopped")
                turn.settle("stopped", reason=stop.reason)
                return
            if not result.calls:
                turn.settle("completed")
                return
            await self._run_tools(turn, result.calls)

    async def _record_step(self, turn: Turn, result: _Step) -> None:
        """Persist the assistant row and price the step (its usage row is written behind the loop)."""
        req = turn.req
        text = "".join(result.text)
        if text:
            turn.last_text = text
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.input)} for c in result.calls
        ]
        part = None if result.usage is None else turn.meter_step(result.usage, result.duration_ms)
        if content or result.stopped:
            row: dict[str, Any] = {
                "role": "assistant",
                "content": content,
                "model": turn.model_ref,
                "step": turn.step,
                "request_id": req.session.request_id,
            }
            if result.stopped:
                row["stopped"] = True
            elif result.stop is not None:
                row["stop_reason"] = result.stop.reason
            await turn.transcript.append(row)
        if part is not None:
            turn.emit(part.as_event())

    async def _stream(self, turn: Turn, model_request: ModelRequest) -> _Step:
        acc = _Step()
        emit, step = turn.emit, turn.step
        started = time.monotonic()

        async def consume() -> None:
            async for event in turn.req.model.stream(model_request):
                if isinstance(event, TextDelta):
                    acc.text.append(event.text)
                    emit(TextEvent(text=event.text, step=step))
                elif isinstance(event, ToolUseEvent):
                    acc.calls.append(event)
                elif isinstance(event, UsageEvent):
                    acc.usage = event
                elif isinstance(event, StopEvent):
                    acc.stop = event

        try:
            acc.stopped = await turn.stop.guard(consume())
        except ProviderError:
            if acc.usage is not None:  # the provider bills what it reported before it failed
                turn.emit(turn.meter_step(acc.usage, int((time.monotonic() - started) * 1000)).as_event())
            raise
        acc.duration_ms = int((time.monotonic() - started) * 1000)
        if acc.stopped:
            acc.calls.clear()  # a half-streamed call is not a call
        return acc

    async def _run_tools(self, turn: Turn, calls: list[ToolUseEvent]) -> None:
        """Run one step's calls concurrently; their results share one transcript row."""
        req = turn.req
        writer = ToolRowWriter(
            turn.transcript,
            step=turn.step,
            request_id=req.session.request_id or "",
            order=[c.id for c in calls],
        )
        done: set[str] = set()

        async def one(call: ToolUseEvent) -> None:
            ctx = ToolContext(
                session=req.session.replace(tool_use_id=call.id),
                request=req,
                runtime=self,
                results=turn.results,
                step=turn.step,
                emit=turn.emit,
                stop=turn.stop,
                turn_state=turn.state,
                record_usage=turn.charge,
            )
            block = await run_tool_call(call, ctx)
            await writer.add(block)
            done.add(call.id)

        async def all_calls() -> None:
            async with asyncio.TaskGroup() as group:
                for call in calls:
                    group.create_task(one(call))

        if await turn.stop.guard(all_calls()):
            for call in calls:
                if call.id not in done:
                    await writer.add(
                        {
                            "type": "tool_result",
                            "tool_use_id": call.id,
                            "name": call.name,
                            "content": refusals.stopped(call.name),
                            "is_error": True,
                            "outcome": "stopped",
                        }
                    )


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _replace(obj: Any, **changes: Any) -> Any:
    from dataclasses import replace

    return replace(obj, **changes)
