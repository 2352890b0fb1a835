"""The agent loop: one turn of steps, each a model call and the tool calls it asked for.

The runtime is a library: a turn runs wherever it was asked for (a kernel cell, a server route, the
CLI). Every row is persisted as it happens; usage is priced per model partition and written after each
step; spend limits and the rate cap are checked before each model call; a stop is honoured between
steps, while the model streams and while tools run. A turn always ends with one :class:`TurnSettled`:
``completed``, ``suspended`` (a budget ran out; a handoff checkpoint is published), ``stopped``,
``refused`` (a limit, said in words) or ``failed`` (the provider failed).
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

from ..contracts.envelope import BudgetUse, budget_exhausted
from ..contracts.identity import assert_not_sentinel
from ..providers.base import ModelRequest, StopEvent, TextDelta, ToolUseEvent, UsageEvent
from ..providers.catalog import Catalog, load_catalog
from ..providers.errors import CassetteMismatch, ProviderError
from ..store import Store
from .context import StopSignal, ToolContext, TurnRequest
from .dispatch import run_tool_call
from .errors import TurnRefused
from .events import RateLimited, RuntimeEvent, StepStarted, TurnSettled, TurnStarted
from .events import TextDelta as TextEvent
from .handoff import publish_handoff
from .limits import RateLimiter, SpendGuard
from .meter import TurnMeter, utcnow
from .results import ResultStore, read_tool_result_tool
from .transcript import ToolRowWriter, history_messages

__all__ = ["AgentRuntime"]

log = logging.getLogger(__name__)
_DONE = object()


def new_request_id() -> str:
    return "r-" + uuid.uuid4().hex[:16]


@dataclass(kw_only=True)
class _Step:
    text: list[str] = field(default_factory=list)
    calls: list[ToolUseEvent] = field(default_factory=list)
    usage: UsageEvent | None = None
    stop: StopEvent | None = None
    stopped: bool = False


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
        self.spend_guard = spend_guard or SpendGuard(store.usage)
        self.rate_limiter = rate_limiter or RateLimiter(store.calls)

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
        if "read_tool_result" not in tools:
            tools = tools.with_intrinsic([read_tool_result_tool()])
        req = _replace(req, session=session, stop=stop, tools=tools)
        meter = TurnMeter(session=session, catalog=self.catalog, usage=self.store.usage, started=utcnow())
        results = ResultStore(conv.path)
        budgets = req.envelope.budgets
        max_steps = min(budgets.max_steps or self.max_steps, self.max_steps)
        turn_state: dict[str, Any] = {}
        user_seq = 0
        if req.message is not None:
            user_seq = await asyncio.to_thread(
                conv.append,
                {
                    "role": "user",
                    "content": [{"type": "text", "text": req.message}],
                    "user_id": session.user_id,
                    "request_id": session.request_id,
                },
            )
        emit(
            TurnStarted(
                request_id=session.request_id or "",
                conversation_id=conv.id,
                agent_id=session.agent_id,
                model=f"{req.model.provider}:{req.model.model_id}",
                user_seq=user_seq,
            )
        )
        static = req.prompt.static(session)  # byte-stable across the turn's steps
        step = 0
        last_text = ""

        def settle(status: str, **extra: Any) -> None:
            parts = meter.partitions
            emit(
                TurnSettled(
                    status=status,  # type: ignore[arg-type]
                    text=last_text,
                    steps=step,
                    input_tokens=sum(
                        p.input_tokens + p.cache_read_tokens + p.cache_write_tokens for p in parts
                    ),
                    output_tokens=sum(p.output_tokens for p in parts),
                    cost_usd=meter.total_usd,
                    duration_ms=int((time.monotonic() - started) * 1000),
                    usage=tuple(p.as_event() for p in parts),
                    **extra,
                )
            )

        try:
            while True:
                if await stop.check(force_poll=True):
                    await self._note(conv, "stopped", stop.reason or "stopped", step)
                    settle("stopped", reason=stop.reason)
                    return
                used = BudgetUse(steps=step, tokens=meter.total_tokens, usd=meter.total_usd)
                exhausted = budget_exhausted(_replace(budgets, max_steps=max_steps), used)
                if exhausted:
                    fate = await publish_handoff(
                        conv,
                        publisher=req.handoff,
                        session=session,
                        budget=exhausted,
                        used=used,
                        text=last_text,
                    )
                    settle(
                        "suspended", budget=exhausted, handoff=fate, reason=f"the {exhausted} budget ran out"
                    )
                    return
                # The running turn's own spend is already in the store: the meter writes it after each step.
                await asyncio.to_thread(self.spend_guard.check, session)
                await self.rate_limiter.acquire(
                    session, on_wait=lambda d, rpm: emit(RateLimited(wait_seconds=d, limit_rpm=rpm))
                )
                step += 1
                emit(StepStarted(step=step, max_steps=max_steps))
                rows = await asyncio.to_thread(conv.read_all)
                if req.history is not None:
                    rows = req.history(rows)
                model_request = ModelRequest(
                    model=req.model.model_id,
                    system=static,
                    system_dynamic=req.prompt.dynamic(session, step=step, max_steps=max_steps),
                    messages=tuple(history_messages(rows)),
                    tools=tools.specs(),
                    max_tokens=req.max_tokens,
                    temperature=req.temperature,
                )
                call_started = time.monotonic()
                result = await self._stream(req, model_request, step, emit, stop)
                if result.usage is not None:
                    await asyncio.to_thread(
                        meter.add,
                        req.model.provider,
                        req.model.model_id,
                        result.usage,
                        duration_ms=int((time.monotonic() - call_started) * 1000),
                    )
                    emit(meter.partitions[-1].as_event())
                text = "".join(result.text)
                content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
                content += [
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.input)}
                    for c in result.calls
                ]
                if content or result.stopped:
                    row: dict[str, Any] = {
                        "role": "assistant",
                        "content": content,
                        "model": f"{req.model.provider}:{req.model.model_id}",
                        "step": step,
                        "request_id": session.request_id,
                    }
                    if result.stopped:
                        row["stopped"] = True
                    elif result.stop is not None:
                        row["stop_reason"] = result.stop.reason
                    await asyncio.to_thread(conv.append, row)
                if text:
                    last_text = text
                if result.stopped:
                    await self._note(conv, "stopped", stop.reason or "stopped", step)
                    settle("stopped", reason=stop.reason)
                    return
                if not result.calls:
                    settle("completed")
                    return
                await self._run_tools(req, result.calls, step, emit, stop, results, turn_state)
        except TurnRefused as exc:
            await self._note(conv, "refused", str(exc), step)
            settle("refused", reason=str(exc))
        except CassetteMismatch:
            raise
        except ProviderError as exc:
            log.warning("turn %s failed: %s", session.request_id, exc)
            await self._note(conv, "failed", str(exc), step)
            settle("failed", reason=str(exc))
        finally:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(meter.finish, duration_ms=int((time.monotonic() - started) * 1000))

    async def _note(self, conv: Any, kind: str, text: str, step: int) -> None:
        await asyncio.to_thread(
            conv.append, {"role": "event", "step": step, "content": [{"type": kind, "text": text}]}
        )

    async def _stream(
        self,
        req: TurnRequest,
        model_request: ModelRequest,
        step: int,
        emit: Callable[[RuntimeEvent], None],
        stop: StopSignal,
    ) -> _Step:
        acc = _Step()

        async def consume() -> None:
            async for event in req.model.stream(model_request):
                if isinstance(event, TextDelta):
                    acc.text.append(event.text)
                    emit(TextEvent(text=event.text, step=step))
                elif isinstance(event, ToolUseEvent):
                    acc.calls.append(event)
                elif isinstance(event, UsageEvent):
                    acc.usage = event
                elif isinstance(event, StopEvent):
                    acc.stop = event

        if await _race(consume(), stop):
            acc.stopped = True
            acc.calls.clear()  # a half-streamed call is not a call
        return acc

    async def _run_tools(
        self,
        req: TurnRequest,
        calls: list[ToolUseEvent],
        step: int,
        emit: Callable[[RuntimeEvent], None],
        stop: StopSignal,
        results: ResultStore,
        turn_state: dict[str, Any],
    ) -> None:
        """Run one step's calls concurrently; their results share one transcript row."""
        writer = ToolRowWriter(
            req.conversation, step=step, request_id=req.session.request_id or "", order=[c.id for c in calls]
        )
        done: set[str] = set()

        async def one(call: ToolUseEvent) -> None:
            ctx = ToolContext(
                session=req.session.replace(tool_use_id=call.id),
                request=req,
                runtime=self,
                results=results,
                step=step,
                emit=emit,
                stop=stop,
                turn_state=turn_state,
            )
            block = await run_tool_call(call, ctx)
            await writer.add(block)
            done.add(call.id)

        async def all_calls() -> None:
            async with asyncio.TaskGroup() as group:
                for call in calls:
                    group.create_task(one(call))

        if await _race(all_calls(), stop):
            from ..contracts import refusals

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


async def _race(work: Any, stop: StopSignal) -> bool:
    """Run ``work`` until it ends or a stop arrives; True when the stop won (``work`` is cancelled).

    An in-process stop wakes the race at once; a stop flag in the store is polled every
    ``stop.poll_interval`` seconds.
    """
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        while True:
            done, _ = await asyncio.wait(
                {task, waiter}, timeout=stop.poll_interval, return_when=asyncio.FIRST_COMPLETED
            )
            if task in done:
                task.result()
                return False
            if waiter in done or await stop.check():
                return True
    finally:
        for t in (task, waiter):
            if not t.done():
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t


def _replace(obj: Any, **changes: Any) -> Any:
    from dataclasses import replace

    return replace(obj, **changes)
