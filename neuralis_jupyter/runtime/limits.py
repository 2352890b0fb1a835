"""Spend limits and the per-minute model request cap, checked BEFORE each model call.

Spend rules come from the session (the project's configuration): a project total, a per-user ceiling
for every holder of a role (``by_role``), a ceiling for one user (``by_user``) and one for one agent
(``by_agent``), each over a calendar window (UTC day, ISO week from Monday, or month). A rule is
breached when the spend recorded in its window plus what the running turn has spent so far reaches its
amount; the refusal names the rule and says who can raise it.

The rate cap counts model calls per user in a rolling minute, in the store, so that every process on it
shares one count. Taking a slot is one compare-and-insert (:meth:`CallLog.reserve`): two runs that ask at
once can never both take the last slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from ..contracts.identity import SessionContext, SpendRule
from ..store.usage import UsageStore
from .errors import RateLimitExceeded, SpendLimitExceeded

__all__ = ["CallLog", "RateLimiter", "SpendGuard", "window_start"]


def window_start(period: str, now: datetime) -> datetime:
    now = now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    raise ValueError(f"period must be day, week or month, got {period!r}")


_PERIOD_WORD = {"day": "daily", "week": "weekly", "month": "monthly"}


class SpendGuard:
    def __init__(self, usage: UsageStore, *, clock: Callable[[], datetime] | None = None) -> None:
        self._usage = usage
        self._clock = clock or (lambda: datetime.now(UTC))

    def rules(self, session: SessionContext) -> list[tuple[str, str, SpendRule, dict[str, str]]]:
        """(limit name, description, rule, spend filter) for every rule that applies to the session."""
        limits = session.spend_limits
        if limits is None:
            return []
        found: list[tuple[str, str, SpendRule, dict[str, str]]] = []
        if limits.project_total:
            found.append(("project_total", "the project's", limits.project_total, {}))
        if session.role and session.role in limits.by_role:
            found.append(
                (
                    f"by_role.{session.role}",
                    f"the per-user {session.role!r} role",
                    limits.by_role[session.role],
                    {"user_id": session.user_id},
                )
            )
        if session.user_id in limits.by_user:
            found.append(
                (
                    f"by_user.{session.user_id}",
                    f"user {session.user_id!r}'s",
                    limits.by_user[session.user_id],
                    {"user_id": session.user_id},
                )
            )
        if session.agent_id and session.agent_id in limits.by_agent:
            found.append(
                (
                    f"by_agent.{session.agent_id}",
                    f"agent {session.agent_id!r}'s",
                    limits.by_agent[session.agent_id],
                    {"agent_id": session.agent_id},
                )
            )
        return found

    def check(self, session: SessionContext, *, pending_usd: float = 0.0) -> None:
        """Raise :class:`SpendLimitExceeded` naming the first rule the next call would break."""
        now = self._clock()
        for name, description, rule, filters in self.rules(session):
            since = window_start(rule.period, now)
            spent = self._usage.spend(session.project_id, since=since, **filters) + pending_usd
            if spent >= rule.amount_usd:
                raise SpendLimitExceeded(
                    name,
                    f"{description} {_PERIOD_WORD[rule.period]} spend limit of ${rule.amount_usd:,.2f} is "
                    f"reached (${spent:,.4f} spent since {since:%Y-%m-%d}); ask a project owner to raise "
                    f"spend_limits.{name} in project.json, or wait for the next {rule.period}",
                )


class CallLog(Protocol):
    """Where model calls are counted, shared by every process on the store."""

    def reserve(
        self, project_id: str, user_id: str, when: datetime, *, limit: int, window: timedelta
    ) -> datetime | None:
        """Record a call at ``when`` if fewer than ``limit`` were recorded in the ``window`` before it,
        atomically; ``None`` when recorded, else the oldest call in the window (nothing is recorded)."""
        ...


_WINDOW = timedelta(minutes=1)
#: Calls older than this are pruned as a call is recorded, as :class:`CallLogStore` does.


class RateLimiter:
    """``llm_rate_limit_rpm`` model calls per rolling minute per user and project."""

    def __init__(
        self,
        log: CallLog,
        *,
        max_wait: float = 60.0,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._log = log
        self._max_wait = max_wait
        self._clock = clock or (lambda: datetime.now(UTC))

    async def acquire(self, session: SessionContext, *, on_wait: Callable[[float, int], None]) -> None:
        """Take a slot, recording the call; while none is free, wait (telling ``on_wait``)."""
        rpm = session.llm_rate_limit_rpm
        waited = 0.0
        while rpm:
            now = self._clock()
            oldest = await asyncio.to_thread(
                self._log.reserve, session.project_id, session.user_id, now, limit=rpm, window=_WINDOW
            )
            if oldest is None:
                return
            delay = max(0.05, ((oldest + _WINDOW) - now).total_seconds())
            if waited + delay > self._max_wait:
                raise RateLimitExceeded(
                    f"the project allows {rpm} model requests a minute per user and the limit stayed reached "
                    f"for {self._max_wait:.0f} s; try again shortly or ask a project owner to raise "
                    "llm_rate_limit_rpm in project.json"
                )
            on_wait(delay, rpm)
            await asyncio.sleep(delay)
            waited += delay
