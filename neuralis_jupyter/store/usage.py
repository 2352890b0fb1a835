"""Usage events: one row per priced model call, the source of spend limits and of ``frames.usage()``.

Storage design
--------------
Rows live in the ``usage_events`` table (see :mod:`.migrations`), one per pricing partition of a model
call: the model, the token counts, the catalog-price estimate ``cost_usd`` and, for subscription-billed
models, the pay-as-you-go ``equivalent_cost_usd`` stamped at write time. The runtime inserts a
partition's row after its first priced step and updates it after every later one (:meth:`insert`,
:meth:`update`), so a crash loses at most the step in flight. ``ts`` is the turn's start, stored as
integer microseconds (UTC), and surfaces as an aware datetime.

The spend check runs before every model call, so :meth:`UsageStore.spend` is a single ``SUM`` over an
index range: ``(project_id, ts, cost_usd)`` answers the project total from the index alone, and the
user and agent indexes narrow the per-user and per-agent checks.

Every write refuses an event whose id columns hold a ``__system__`` sentinel (seed 002: sentinels are
process-internal and never persisted); system work on a real project carries that project's real ids.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..contracts.identity import assert_no_sentinel_ids
from .migrations import from_micros, to_micros, usage_events

__all__ = ["USAGE_COLUMNS", "UsageEvent", "UsageStore", "select_usage"]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True)
class UsageEvent:
    """One priced model call (or one model's share of it). Costs are catalog-price estimates in USD."""

    ts: datetime = field(default_factory=_now)
    project_id: str
    user_id: str
    agent_id: str | None = None
    conversation_id: str | None = None
    request_id: str
    provider: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    steps: int = 0
    cost_usd: float
    equivalent_cost_usd: float | None = None
    duration_ms: int = 0

    def __post_init__(self) -> None:
        to_micros(self.ts)  # refuses a naive or non-datetime ts with a message saying what to do


#: Column names in table order (without ``id``); the field order of :class:`UsageEvent`.
USAGE_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(UsageEvent))


#: The identity columns a sentinel must never reach.
_ID_COLUMNS = ("project_id", "user_id", "agent_id", "conversation_id", "request_id")


def _to_row(event: UsageEvent) -> dict[str, Any]:
    assert_no_sentinel_ids(**{name: getattr(event, name) for name in _ID_COLUMNS})
    row = {name: getattr(event, name) for name in USAGE_COLUMNS}
    row["ts"] = to_micros(event.ts)
    return row


def select_usage(
    project_id: str | None = None,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    conversation_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> sa.Select[Any]:
    """The one SELECT behind :meth:`UsageStore.list` and ``frames.usage()``: ``since <= ts < until``."""
    stmt = sa.select(*(usage_events.c[name] for name in USAGE_COLUMNS))
    for column, value in (
        ("project_id", project_id),
        ("user_id", user_id),
        ("agent_id", agent_id),
        ("conversation_id", conversation_id),
    ):
        if value is not None:
            stmt = stmt.where(usage_events.c[column] == value)
    if since is not None:
        stmt = stmt.where(usage_events.c.ts >= to_micros(since, name="since"))
    if until is not None:
        stmt = stmt.where(usage_events.c.ts < to_micros(until, name="until"))
    return stmt.order_by(usage_events.c.ts, usage_events.c.id)


class UsageStore:
    """Record usage events and answer spend questions over one migrated engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, event: UsageEvent) -> None:
        self.record_many([event])

    def insert(self, event: UsageEvent) -> int:
        """Insert one row and return its id, for :meth:`update` as the partition grows."""
        with self.engine.begin() as conn:
            result = conn.execute(usage_events.insert().values(**_to_row(event)))
            return int(result.inserted_primary_key[0])

    def update(self, row_id: int, event: UsageEvent) -> None:
        """Replace the counts of row ``row_id`` with ``event``'s running totals."""
        with self.engine.begin() as conn:
            conn.execute(usage_events.update().where(usage_events.c.id == row_id).values(**_to_row(event)))

    def record_many(self, events: Iterable[UsageEvent]) -> int:
        """Insert ``events`` in one transaction with one executemany; return how many."""
        rows = [_to_row(e) for e in events]
        if rows:
            with self.engine.begin() as conn:
                conn.execute(usage_events.insert(), rows)
        return len(rows)

    def spend(
        self,
        project_id: str,
        *,
        since: datetime,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> float:
        """USD spent in ``project_id`` from ``since`` on, optionally for one user and/or agent."""
        t = usage_events.c
        stmt = sa.select(sa.func.coalesce(sa.func.sum(t.cost_usd), 0.0)).where(
            t.project_id == project_id, t.ts >= to_micros(since, name="since")
        )
        if user_id is not None:
            stmt = stmt.where(t.user_id == user_id)
        if agent_id is not None:
            stmt = stmt.where(t.agent_id == agent_id)
        with self.engine.connect() as conn:
            return float(conn.scalar(stmt) or 0.0)

    def list(
        self,
        project_id: str | None = None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        conversation_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> builtins.list[UsageEvent]:
        """Events matching every given filter, oldest first (the filters of ``frames.usage()``)."""
        stmt = select_usage(
            project_id,
            user_id=user_id,
            agent_id=agent_id,
            conversation_id=conversation_id,
            since=since,
            until=until,
        )
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [UsageEvent(**{**row._asdict(), "ts": from_micros(row.ts)}) for row in rows]
