"""Token and dollar accounting of one turn, one pricing partition per model.

A turn that spans two models (a sub-agent on another model, a model switch) is two usage events that
share the turn's request id. Each partition's row is written as soon as its first step is priced, then
updated at most every ``write_interval`` seconds while the turn runs (a real model call takes longer than
that, so in practice after every step), and finally when the turn ends: a crash loses at most that
interval's steps. The writes run behind the loop, in order, while the next model call is in flight;
:meth:`TurnMeter.flush` waits for them (before a spend check reads the store, and when the turn ends).

A write that fails (a locked or full database) is logged and its partition stays pending, so the next
write retries it with the latest totals; it never stops the writes after it. What is still unwritten
when the turn ends is logged as an error by :meth:`TurnMeter.finish`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from ..contracts.identity import SessionContext
from ..providers.base import UsageEvent as ModelUsage
from ..providers.catalog import PRICING_BASIS, Catalog, cost_usd
from ..store.usage import UsageEvent, UsageStore
from .events import UsageUpdated

__all__ = ["Partition", "TurnMeter"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Partition:
    provider: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    steps: int = 0
    server_tool_uses: tuple[tuple[str, int], ...] = ()
    cost_usd: float = 0.0

    def as_event(self) -> UsageUpdated:
        return UsageUpdated(
            provider=self.provider,
            model=self.model,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cache_read_tokens=self.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens,
            steps=self.steps,
            cost_usd=self.cost_usd,
            pricing_basis=PRICING_BASIS,
        )


class TurnMeter:
    def __init__(
        self,
        *,
        session: SessionContext,
        catalog: Catalog,
        usage: UsageStore | None,
        started: datetime,
        write_interval: float = 1.0,
    ) -> None:
        self._session = session
        self._catalog = catalog
        self._usage = usage
        self._started = started
        self._parts: dict[tuple[str, str], Partition] = {}
        self._row_ids: dict[tuple[str, str], int] = {}
        self._writing: asyncio.Future[None] | None = None
        self._write_interval = write_interval
        self._last_write = 0.0
        self._pending: dict[tuple[str, str], int] = {}

    @property
    def partitions(self) -> tuple[Partition, ...]:
        return tuple(self._parts.values())

    @property
    def total_usd(self) -> float:
        return sum(p.cost_usd for p in self._parts.values())

    @property
    def total_tokens(self) -> int:
        return sum(
            p.input_tokens + p.output_tokens + p.cache_read_tokens + p.cache_write_tokens
            for p in self._parts.values()
        )

    def add(
        self, provider: str, model: str, usage: ModelUsage, *, duration_ms: int, count_step: bool = True
    ) -> Partition:
        """Price one model call; :meth:`persist_behind` writes it. A call a tool makes on the turn's
        behalf (a native web search) is charged to the same partition with ``count_step=False``."""
        entry = self._catalog.lookup(provider, model, allow_unpriced=True)
        key = (provider, model)
        part = self._parts.get(key) or Partition(provider=provider, model=model)
        part = replace(
            part,
            input_tokens=part.input_tokens + usage.input_tokens,
            output_tokens=part.output_tokens + usage.output_tokens,
            cache_read_tokens=part.cache_read_tokens + usage.cache_read_tokens,
            cache_write_tokens=part.cache_write_tokens + usage.cache_write_tokens,
            steps=part.steps + (1 if count_step else 0),
            server_tool_uses=_merge(part.server_tool_uses, usage.server_tool_uses),
        )
        part = replace(
            part,
            cost_usd=cost_usd(
                entry.prices,
                input_tokens=part.input_tokens,
                output_tokens=part.output_tokens,
                cache_read_tokens=part.cache_read_tokens,
                cache_write_tokens=part.cache_write_tokens,
                server_tool_uses=dict(part.server_tool_uses),
            ),
        )
        self._parts[key] = part
        self._pending[key] = duration_ms
        return part

    def persist_behind(self, *, force: bool = False) -> None:
        """Write every partition priced since the last write, behind the loop and in order.

        A partition's first row is written at once; later updates wait for ``write_interval``.
        """
        if self._usage is None or not self._pending:
            self._pending.clear()
            return
        now = time.monotonic()
        fresh = any(key not in self._row_ids for key in self._pending)
        if not (force or fresh or now - self._last_write >= self._write_interval):
            return
        self._last_write = now
        pending = dict(self._pending)
        self._pending.clear()
        previous = self._writing

        async def write() -> None:
            if previous is not None:
                await previous  # never raises: each write below handles its own failure
            for key, duration_ms in pending.items():
                try:
                    await asyncio.to_thread(self._persist, key, self._parts[key], duration_ms)
                except Exception:
                    log.warning(
                        "could not write the usage of %s on %s:%s; the next write retries it",
                        self._session.request_id,
                        *key,
                        exc_info=True,
                    )
                    self._pending.setdefault(key, duration_ms)

        self._writing = asyncio.ensure_future(write())

    async def flush(self) -> None:
        """Wait until every priced step is in the store."""
        self.persist_behind(force=True)
        if self._writing is not None:
            await self._writing

    def _persist(self, key: tuple[str, str], part: Partition, duration_ms: int) -> None:
        if self._usage is None:
            return
        s = self._session
        event = UsageEvent(
            ts=self._started,
            project_id=s.project_id,
            user_id=s.user_id,
            agent_id=s.agent_id,
            conversation_id=s.conversation_id,
            request_id=s.request_id or "",
            provider=part.provider,
            model=part.model,
            input_tokens=part.input_tokens,
            output_tokens=part.output_tokens,
            cache_read_tokens=part.cache_read_tokens,
            cache_write_tokens=part.cache_write_tokens,
            steps=part.steps,
            cost_usd=part.cost_usd,
            equivalent_cost_usd=None,
            duration_ms=duration_ms,
        )
        row_id = self._row_ids.get(key)
        if row_id is None:
            self._row_ids[key] = self._usage.insert(event)
        else:
            self._usage.update(row_id, event)

    async def finish(self, *, duration_ms: int) -> None:
        """Wait for pending writes, then stamp the turn's duration on every partition.

        A partition that still could not be written is logged as an error (its usage is lost)."""
        for key in self._parts:
            self._pending[key] = duration_ms
        await self.flush()
        if self._pending and self._usage is not None:
            log.error(
                "the usage of %s on %s could not be written; the store misses it",
                self._session.request_id,
                ", ".join(f"{p}:{m}" for p, m in self._pending),
            )


def _merge(counts: tuple[tuple[str, int], ...], more: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    merged = dict(counts)
    for tool, n in more.items():
        merged[tool] = merged.get(tool, 0) + n
    return tuple(sorted(merged.items()))


def utcnow() -> datetime:
    return datetime.now(UTC)
