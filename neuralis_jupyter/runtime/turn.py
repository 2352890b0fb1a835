"""One turn's state, and what it does with it: price its steps, note how it ended, settle it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..providers.base import UsageEvent
from .context import StopSignal, TurnRequest
from .events import RuntimeEvent, TurnSettled
from .meter import Partition, TurnMeter
from .results import ResultStore
from .transcript import TurnTranscript

__all__ = ["Turn"]

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Turn:
    """One turn's state; lives exactly as long as the turn."""

    req: TurnRequest
    emit: Callable[[RuntimeEvent], None]
    transcript: TurnTranscript
    meter: TurnMeter
    results: ResultStore
    max_steps: int
    started: float
    step: int = 0
    user_seq: int = 0
    last_text: str = ""
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def stop(self) -> StopSignal:
        assert self.req.stop is not None
        return self.req.stop

    @property
    def model_ref(self) -> str:
        return f"{self.req.model.provider}:{self.req.model.model_id}"

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def meter_step(self, usage: UsageEvent, duration_ms: int) -> Partition:
        """Price one model call of the turn's own model (its usage row is written behind the loop)."""
        part = self.meter.add(
            self.req.model.provider, self.req.model.model_id, usage, duration_ms=duration_ms
        )
        self.meter.persist_behind()
        return part

    def charge(self, provider: str, model: str, usage: UsageEvent) -> None:
        """A tool's model call for this turn: the same partition, no step counted."""
        try:
            part = self.meter.add(provider, model, usage, duration_ms=0, count_step=False)
            self.meter.persist_behind(force=True)
            self.emit(part.as_event())
        except Exception:
            log.exception("could not charge a tool's model call to turn %s", self.req.session.request_id)

    async def note(self, kind: str, text: str) -> None:
        """An event row saying how the turn ended; a failure to write it must not keep the turn from
        settling."""
        row = {"role": "event", "step": self.step, "content": [{"type": kind, "text": text}]}
        try:
            await asyncio.to_thread(self.req.conversation.append, row)
        except Exception:
            log.exception("could not note %r for turn %s", kind, self.req.session.request_id)

    def settle(self, status: str, **extra: Any) -> None:
        parts = self.meter.partitions
        self.emit(
            TurnSettled(
                status=status,  # type: ignore[arg-type]
                text=self.last_text,
                steps=self.step,
                input_tokens=sum(p.input_tokens + p.cache_read_tokens + p.cache_write_tokens for p in parts),
                output_tokens=sum(p.output_tokens for p in parts),
                cost_usd=self.meter.total_usd,
                duration_ms=self.elapsed_ms(),
                usage=tuple(p.as_event() for p in parts),
                **extra,
            )
        )
