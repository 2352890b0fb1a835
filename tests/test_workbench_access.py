"""Who may open which conversation, and whose the project's default agent is."""

from __future__ import annotations

import json
import threading

import pytest

from neuralis_jupyter.store import NotFound, Store
from neuralis_jupyter.workbench import AgentNotVisible, Workbench


@pytest.fixture
def bench(tmp_path):
    store = Store.open(tmp_path / "home")
    path = store.data_root.project_dir("lab") / "project.json"
    path.parent.mkdir(parents=True)
    members = {"alice": "owner", "dave": "admin", "bob": "member", "carol": "member", "vic": "viewer"}
    path.write_text(json.dumps({"id": "lab", "members": members}))
    return Workbench(store=store)


def test_a_conversation_is_its_creators(bench):
    mine = bench.target("bob", project_id="lab")
    mine.conversation.append({"role": "user", "content": [{"type": "text", "text": "bob's secret"}]})
    cid = mine.conversation.id
    with pytest.raises(NotFound) as refused:
        bench.target("carol", project_id="lab", conversation_id=cid)
    with pytest.raises(NotFound) as missing:
        bench.target("carol", project_id="lab", conversation_id="c-does-not-exist")
    # A refusal reads exactly like a conversation that does not exist: no existence oracle.
    assert str(refused.value).replace(cid, "X") == str(missing.value).replace("c-does-not-exist", "X")
    assert bench.target("bob", project_id="lab", conversation_id=cid).conversation.id == cid
    # Oversight: the owner and admin tiers may open it.
    assert bench.target("dave", project_id="lab", conversation_id=cid).conversation.id == cid
    assert bench.target("alice", project_id="lab", conversation_id=cid).conversation.id == cid


def test_a_fork_is_its_forkers(bench):
    bob = bench.target("bob", project_id="lab")
    fork = bench.store.conversations.fork(bob.conversation, user_id="carol")
    assert bench.target("carol", project_id="lab", conversation_id=fork.id).conversation.id == fork.id
    with pytest.raises(NotFound):
        bench.target("bob", project_id="lab", conversation_id=fork.id)


def test_the_default_agent_belongs_to_the_project(bench):
    first = bench.target("bob", project_id="lab")  # a member touches it first
    record = bench.store.agents.get("lab", first.agent.id)
    assert record.created_by == "alice"  # provisioned for the project's owner, not for bob
    for user in ("carol", "vic", "dave"):
        assert bench.target(user, project_id="lab").agent.id == record.id


def test_other_agents_follow_agent_access(bench):
    from neuralis_jupyter.contracts import SessionContext

    owner = SessionContext(user_id="bob", project_id="lab", priority=30, agent_access="own")
    bench.store.agents.create(owner, name="Bob's helper")
    assert bench.target("bob", project_id="lab", agent_id="bob-s-helper").agent.id == "bob-s-helper"
    with pytest.raises(AgentNotVisible):
        bench.target("carol", project_id="lab", agent_id="bob-s-helper")
    assert bench.target("vic", project_id="lab", agent_id="bob-s-helper").agent.id == "bob-s-helper"  # view
    with pytest.raises(AgentNotVisible):
        bench.target("carol", project_id="lab", agent_id="ghost")


def test_turns_that_start_at_once_share_one_provisioned_default_agent(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    bench = Workbench(store=Store.open(tmp_path / "home"))
    barrier = threading.Barrier(8)

    def first_touch(_):
        barrier.wait()
        return bench.target("alice").agent.id

    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(first_touch, range(8)))
    assert len(set(ids)) == 1
    agents = bench.store.data_root.agent_dir("default", ids[0]).parent
    assert [p.name for p in agents.iterdir()] == [ids[0]]  # no half-built .tmp- folder left behind
