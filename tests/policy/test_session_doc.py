"""session_to_dict / session_from_dict: JSON-safe, every field round-trips, system envelopes refused."""

from __future__ import annotations

import json

import pytest

from neuralis_jupyter.contracts import (
    AgentOwnership,
    CrossPackageSession,
    SessionContext,
    SpendLimits,
    SpendRule,
    create_system_session,
)
from neuralis_jupyter.contracts.identity import session_from_dict, session_to_dict

FULL = SessionContext(
    user_id="alice",
    project_id="lab",
    agent_id="assistant",
    conversation_id="c-1",
    request_id="r-1",
    tool_use_id="t-1",
    delegate_run_id="d-1",
    delegate_mode="background",
    role="member",
    priority=30,
    granted_features=("core.execute", "core.web"),
    spend_limits=SpendLimits(
        project_total=SpendRule(amount_usd=100.0),
        by_role={"member": SpendRule(amount_usd=5.0, period="day")},
        by_user={"alice": SpendRule(amount_usd=2.5, period="week")},
        by_agent={"assistant": SpendRule(amount_usd=1.0)},
    ),
    llm_rate_limit_rpm=12,
    agent_access="own",
    agent_ownership={"assistant": AgentOwnership(created_by="alice", assigned_to=("bob", "carol"))},
)


@pytest.mark.parametrize(
    "who",
    [
        FULL,
        SessionContext(user_id="alice", project_id="lab"),
        SessionContext(user_id="a", project_id="p", spend_limits=SpendLimits(), granted_features=()),
        CrossPackageSession(user_id="alice", project_id="lab", caller_package_id="lab-tools", priority=10),
    ],
)
def test_round_trip_through_json(who):
    doc = json.loads(json.dumps(session_to_dict(who)))
    back = session_from_dict(doc)
    assert back == who
    assert type(back) is type(who)


def test_a_system_session_is_never_serialised():
    with pytest.raises(TypeError, match="never serialised"):
        session_to_dict(create_system_session("sync-scheduler", "agent-core"))


def test_unknown_keys_and_missing_ids_are_refused():
    doc = dict(session_to_dict(FULL))
    with pytest.raises(ValueError, match="unknown field"):
        session_from_dict({**doc, "is_system": True})
    with pytest.raises(ValueError, match="user_id and project_id"):
        session_from_dict({k: v for k, v in doc.items() if k != "user_id"})
