"""Spend-limit windows on a fixed clock: a rule counts only the spend of its own UTC day, ISO week (from
Monday) or month, and a per-agent rule only that agent's spend. Each boundary is tested from both sides."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from neuralis_jupyter.contracts import SpendLimits, SpendRule
from neuralis_jupyter.providers.scripted import Reply, ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, ToolRegistry, TurnRequest
from neuralis_jupyter.runtime.limits import SpendGuard
from neuralis_jupyter.store import Store, UsageEvent

from .helpers import session


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


@pytest.fixture
def conv(store):
    return store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def spent(store: Store, when: datetime, *, usd: float = 2.0, agent_id: str = "assistant") -> None:
    store.usage.record(
        UsageEvent(
            ts=when,
            project_id="default",
            user_id="alice",
            agent_id=agent_id,
            conversation_id="c-old",
            request_id="r-old",
            provider="scripted",
            model="demo",
            steps=1,
            cost_usd=usd,
        )
    )


def turn(store, conv, *, now: datetime, limits: SpendLimits, agent_id: str = "assistant"):
    model = ScriptedModel([Reply(text="ok", input_tokens=1, output_tokens=1)])
    runtime = AgentRuntime(store, spend_guard=SpendGuard(store.usage, clock=lambda: now))
    req = TurnRequest(
        session=session(spend_limits=limits, agent_id=agent_id),
        conversation=conv,
        model=model,
        tools=ToolRegistry(),
        message="go",
    )
    return asyncio.run(runtime.run(req)), model


MONDAY = utc(2026, 3, 9)  # a Monday; the week before ended Sunday 2026-03-08 at 24:00 UTC
WINDOWS = [
    # (period, now, spend at, counts, the window's first day as the refusal names it)
    ("day", utc(2026, 3, 11, 0, 1), utc(2026, 3, 10, 23, 59), False, None),
    ("day", utc(2026, 3, 11, 0, 1), utc(2026, 3, 11, 0, 0), True, "2026-03-11"),
    ("week", MONDAY + timedelta(minutes=1), MONDAY - timedelta(minutes=1), False, None),
    ("week", MONDAY + timedelta(minutes=1), MONDAY, True, "2026-03-09"),
    ("week", MONDAY + timedelta(days=6, hours=23), MONDAY, True, "2026-03-09"),  # Sunday night, same week
    # 01:30 on Monday at UTC+2 is still Sunday in UTC: the week is the UTC one, so Sunday's spend counts.
    ("week", datetime(2026, 3, 9, 1, 30, tzinfo=timezone(timedelta(hours=2))), utc(2026, 3, 8, 23), True,
     "2026-03-02"),
    ("month", utc(2026, 3, 1, 0, 1), utc(2026, 2, 28, 23, 59), False, None),
    ("month", utc(2026, 3, 1, 0, 1), utc(2026, 3, 1), True, "2026-03-01"),
    ("month", utc(2026, 3, 31, 23, 59), utc(2026, 3, 1), True, "2026-03-01"),
]  # fmt: skip


@pytest.mark.parametrize(("period", "now", "at", "counts", "since"), WINDOWS)
def test_a_rule_counts_only_its_own_window(store, conv, period, now, at, counts, since):
    spent(store, at, usd=2.0)
    limits = SpendLimits(project_total=SpendRule(amount_usd=2.0, period=period))
    settled, model = turn(store, conv, now=now, limits=limits)
    if not counts:
        assert settled.status == "completed", settled.reason
        assert len(model.requests) == 1
        return
    assert settled.status == "refused"
    word = {"day": "daily", "week": "weekly", "month": "monthly"}[period]
    assert f"the project's {word} spend limit of $2.00 is reached" in settled.reason
    assert f"since {since}" in settled.reason
    assert model.requests == []  # refused before the model call


@pytest.mark.parametrize(
    ("spender", "runner", "refused"),
    [
        ("assistant", "assistant", True),
        ("other", "assistant", False),  # another agent's spend is not the assistant's
        ("assistant", "other", False),  # and the assistant's rule does not bind another agent
    ],
)
def test_a_by_agent_rule_binds_only_that_agent(store, conv, spender, runner, refused):
    now = utc(2026, 3, 11, 12)
    spent(store, now - timedelta(hours=1), usd=5.0, agent_id=spender)
    limits = SpendLimits(by_agent={"assistant": SpendRule(amount_usd=1.0, period="day")})
    settled, _ = turn(store, conv, now=now, limits=limits, agent_id=runner)
    if refused:
        assert settled.status == "refused"
        assert "by_agent.assistant" in settled.reason
        assert "agent 'assistant''s daily spend limit of $1.00" in settled.reason
    else:
        assert settled.status == "completed", settled.reason
