from __future__ import annotations

import pytest

from neuralis_jupyter.contracts import (
    AgentOwnership,
    SessionContext,
    can_assign_agent_role,
    can_read_agent,
    can_write_agent,
    create_system_session,
)


def session(access, user="bob", ownership=None, priority=30):
    return SessionContext(
        user_id=user,
        project_id="p",
        priority=priority,
        agent_access=access,
        agent_ownership=ownership,
    )


def test_star_reads_and_writes_everything():
    s = session("*")
    assert can_read_agent(s, "a", created_by="alice")
    assert can_write_agent(s, "a", created_by="alice")


def test_view_reads_everything_writes_nothing():
    s = session("view")
    assert can_read_agent(s, "a", created_by="alice")
    assert not can_write_agent(s, "a", created_by="alice")
    assert not can_write_agent(s, "a", created_by="bob")


def test_own_falls_back_to_the_creator():
    s = session("own")
    assert can_read_agent(s, "mine", created_by="bob")
    assert can_write_agent(s, "mine", created_by="bob")
    assert not can_read_agent(s, "theirs", created_by="alice")
    assert not can_write_agent(s, "unknown", created_by=None)


def test_explicit_record_wins_over_the_creator():
    # bob created agent 'a' but the record now assigns it to carol only: the record wins.
    record = {"a": AgentOwnership(created_by="alice", assigned_to=("carol",))}
    bob = session("own", "bob", record)
    assert not can_read_agent(bob, "a", created_by="bob")
    assert not can_write_agent(bob, "a", created_by="bob")
    carol = session("own", "carol", record)
    assert can_read_agent(carol, "a", created_by="bob")
    assert can_write_agent(carol, "a", created_by="bob")
    alice = session("own", "alice", record)
    assert can_write_agent(alice, "a", created_by="bob")


def test_record_for_another_agent_does_not_block_the_fallback():
    record = {"other": AgentOwnership(created_by="alice")}
    assert can_write_agent(session("own", "bob", record), "a", created_by="bob")


@pytest.mark.parametrize("access", [None, "all", "", "OWN"])
def test_unknown_access_denies(access):
    s = session(access)
    assert not can_read_agent(s, "a", created_by="bob")
    assert not can_write_agent(s, "a", created_by="bob")


def test_system_session_reads_and_writes():
    s = create_system_session("bootstrap", "agent-core")
    assert can_read_agent(s, "a", created_by=None)
    assert can_write_agent(s, "a", created_by=None)


@pytest.mark.parametrize(
    ("caller", "target", "allowed"),
    [
        (0, 0, True),  # owner may mint owner
        (0, 40, True),
        (10, 0, False),  # admin may not mint owner
        (10, 10, True),
        (30, 20, False),  # member may not mint manager
        (30, 30, True),
        (30, 40, True),
        (40, 30, False),
        (25, 24, False),  # custom priorities compare numerically
        (25, 26, True),
    ],
)
def test_role_priority_assignment(caller, target, allowed):
    assert can_assign_agent_role(session("*", priority=caller), target) is allowed


def test_no_priority_bypasses_only_for_a_system_session():
    assert can_assign_agent_role(create_system_session("bootstrap", "agent-core"), 0)
    assert not can_assign_agent_role(session("*", priority=None), 40)


def test_conversations_are_their_creators():
    from neuralis_jupyter.contracts.agent_access import can_open_conversation

    member = session("own", "bob", priority=30)
    assert can_open_conversation(member, owner="bob")
    assert not can_open_conversation(member, owner="alice")
    assert can_open_conversation(session("*", "dave", priority=10), owner="alice")  # admin tier
    assert can_open_conversation(session("*", "owen", priority=0), owner="alice")
    assert not can_open_conversation(session("*", "mia", priority=20), owner="alice")  # manager
    assert not can_open_conversation(session("*", "sys", priority=None), owner="alice")
    assert can_open_conversation(create_system_session("bootstrap", "agent-core"), owner="alice")
