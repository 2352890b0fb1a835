"""Sentinel ids never reach a row, and a session that carries one runs no tool (fail closed)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from neuralis_jupyter.contracts.identity import (
    SYSTEM_AGENT_ID,
    SYSTEM_PROJECT_ID,
    SYSTEM_USER_ID,
    SentinelIdentityError,
    create_system_session,
)
from neuralis_jupyter.policy import PolicyEngine
from neuralis_jupyter.store.interactions import GuardOverrideStore

from .helpers import make_tool, session

SENTINELS = (SYSTEM_USER_ID, SYSTEM_PROJECT_ID, SYSTEM_AGENT_ID)


def _writes(store):
    now = datetime.now(UTC)
    guards = GuardOverrideStore(store.engine)
    return {
        "stop.project_id": lambda v: store.stops.request(
            project_id=v, conversation_id="c-1", requested_by="bob"
        ),
        "stop.conversation_id": lambda v: store.stops.request(
            project_id="default", conversation_id=v, requested_by="bob"
        ),
        "stop.requested_by": lambda v: store.stops.request(
            project_id="default", conversation_id="c-1", requested_by=v
        ),
        "calls.record.project_id": lambda v: store.calls.record(v, "bob", now),
        "calls.record.user_id": lambda v: store.calls.record("default", v, now),
        "calls.reserve.user_id": lambda v: store.calls.reserve(
            "default", v, now, limit=5, window=timedelta(minutes=1)
        ),
        "guard.project_id": lambda v: guards.set(v, "c-1", "auto", set_by="bob"),
        "guard.conversation_id": lambda v: guards.set("default", v, "auto", set_by="bob"),
        "guard.set_by": lambda v: guards.set("default", "c-1", "auto", set_by=v),
    }


@pytest.mark.parametrize("sentinel", SENTINELS)
@pytest.mark.parametrize(
    "write",
    [
        "stop.project_id",
        "stop.conversation_id",
        "stop.requested_by",
        "calls.record.project_id",
        "calls.record.user_id",
        "calls.reserve.user_id",
        "guard.project_id",
        "guard.conversation_id",
        "guard.set_by",
    ],
)
def test_no_row_is_written_under_a_sentinel(store, write, sentinel):
    writes = _writes(store)
    with pytest.raises(SentinelIdentityError) as refused:
        writes[write](sentinel)
    assert refused.value.field_name == write.rsplit(".", 1)[1]
    # The same write with a real id goes through: the refusal is the sentinel's, not the call's.
    writes[write]("real-id")


def test_an_unscoped_system_session_runs_no_tool(store):
    engine = PolicyEngine(store)
    tool = make_tool("lookup")
    unscoped = create_system_session("bootstrap", "agent-core")
    decision = asyncio.run(engine.check(tool=tool, input={}, session=unscoped))
    assert (decision.allowed, decision.arm) == (False, "identity")
    assert "scope the system session" in decision.reason


def test_a_system_session_scoped_to_a_real_project_is_judged_by_the_arms(store):
    engine = PolicyEngine(store)
    owner = session(user_id="alice")
    scoped = create_system_session("bootstrap", "agent-core", owner)
    decision = asyncio.run(engine.check(tool=make_tool("lookup"), input={}, session=scoped))
    assert decision.arm != "identity"
    assert decision.allowed
    [row] = store.audit.list("default")
    assert (row.subject, row.outcome, row.user_id) == ("lookup", "allowed", "alice")
