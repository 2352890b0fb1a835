from __future__ import annotations

import json

import pytest

from neuralis_jupyter.contracts import (
    SentinelIdentityError,
    SessionContext,
    create_system_session,
    has_feature,
)
from neuralis_jupyter.store.agents import AgentStore, RolePriorityForbidden, render_template
from neuralis_jupyter.store.errors import NotAMember, NotFound, SeatLimitReached, StoreCorrupt
from neuralis_jupyter.store.paths import DataRoot
from neuralis_jupyter.store.projects import DEFAULT_PROJECT_ID, ProjectStore, local_user_id


@pytest.fixture
def root(tmp_path):
    return DataRoot(tmp_path)


@pytest.fixture
def projects(root):
    return ProjectStore(root)


def write_project(root, doc):
    path = root.project_dir(doc["id"]) / "project.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_default_project_is_owned_by_the_local_user(projects, root):
    assert local_user_id() == "alice"  # NEURALIS_USER from conftest
    project = projects.ensure_default()
    assert project.id == DEFAULT_PROJECT_ID
    assert project.members == {"alice": "owner"}
    assert (root.project_dir("default") / "project.json").is_file()
    session = projects.session_for("alice", "default")
    assert session.priority == 0
    assert has_feature(session, "exec.unconfined")
    # A second call reads the file instead of recreating it.
    assert projects.ensure_default(owner="mallory").members == {"alice": "owner"}


def test_local_user_is_sanitised(monkeypatch):
    monkeypatch.setenv("NEURALIS_USER", "Ann Lee@example.org")
    assert local_user_id() == "Ann-Lee-example.org"


def test_session_comes_from_membership_only(projects, root):
    write_project(
        root,
        {
            "id": "lab",
            "members": {"alice": "owner", "bob": "member", "vic": "viewer", "ops": "operator"},
            "roles": {
                "operator": {
                    "priority": 25,
                    "granted_features": ["core.execute", "exec.host"],
                    "agent_access": "own",
                }
            },
            "spend_limits": {
                "project_total": {"amount_usd": 50, "period": "month"},
                "by_user": {"bob": {"amount_usd": 1.5, "period": "day"}},
            },
            "llm_rate_limit_rpm": 30,
        },
    )
    bob = projects.session_for("bob", "lab", agent_id="a1")
    assert (bob.role, bob.priority, bob.agent_access) == ("member", 30, "own")
    assert has_feature(bob, "core.execute")
    assert not has_feature(bob, "workflow.dispatch")
    assert bob.spend_limits.by_user["bob"].amount_usd == 1.5
    assert bob.spend_limits.project_total.period == "month"
    assert bob.llm_rate_limit_rpm == 30
    assert bob.agent_id == "a1"
    ops = projects.session_for("ops", "lab")
    assert ops.priority == 25
    assert has_feature(ops, "exec.host")
    assert not has_feature(ops, "core.agents")
    with pytest.raises(NotAMember, match="mallory"):
        projects.session_for("mallory", "lab")
    with pytest.raises(SentinelIdentityError):
        projects.session_for("__system__", "lab")
    with pytest.raises(NotFound):
        projects.session_for("alice", "nope")


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({"id": "lab"}, "members"),
        ({"id": "lab", "members": {"a": "wizard"}}, "wizard"),
        ({"id": "lab", "members": {}, "guard": "yolo"}, "guard"),
        ({"id": "lab", "members": {}, "llm_rate_limit_rpm": -1}, "llm_rate_limit_rpm"),
        (
            {"id": "lab", "members": {}, "spend_limits": {"project_total": {"amount_usd": -5}}},
            "amount_usd",
        ),
    ],
)
def test_bad_project_files_name_the_problem(projects, root, doc, fragment):
    write_project(root, doc)

    def load_every_member():
        project = projects.get("lab")
        for user in project.members:
            projects.session_for(user, "lab")

    with pytest.raises(StoreCorrupt, match=fragment):
        load_every_member()


def test_unparsable_project_file(projects, root):
    path = root.project_dir("lab") / "project.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(StoreCorrupt, match=r"project\.json"):
        projects.get("lab")


def test_project_round_trips(projects, root):
    write_project(
        root,
        {
            "id": "lab",
            "members": {"alice": "owner"},
            "roles": {"r": {"priority": 5, "granted_features": ["a"], "agent_access": "view"}},
            "spend_limits": {"by_agent": {"x": {"amount_usd": 2, "period": "week"}}},
            "agent_ownership": {"x": {"created_by": "alice", "assigned_to": ["bob"]}},
            "guard": "safe",
        },
    )
    project = projects.get("lab")
    projects.save(project)
    assert projects.get("lab") == project


# -- agents -----------------------------------------------------------------------------------------


def owner_session(project="default", user="alice"):
    return SessionContext(
        user_id=user, project_id=project, priority=0, granted_features=("*",), agent_access="*"
    )


def test_provision_substitutes_identity_templates(root):
    agents = AgentStore(root)
    record = agents.create(owner_session(), name="Data Wrangler", role="member")
    identity = root.agent_dir("default", record.id) / "identity"
    soul = (identity / "SOUL.md").read_text()
    assert record.id == "data-wrangler"
    assert "**Data Wrangler** (agent `data-wrangler`)" in soul
    assert "project `default` for `alice`" in soul
    assert f"Provisioned {record.created_at}" in soul
    assert "Role: member" in soul
    for name in ("SOUL.md", "USER.md", "HEARTBEAT.md"):
        assert "{{" not in (identity / name).read_text()
    assert agents.get("default", record.id) == record


def test_template_rendering_leaves_unknown_and_dotted_forms():
    text = "{{agentId}} {{user.id}} {{nope}} {{ agentId }}"
    assert render_template(text, {"agentId": "a1"}) == "a1 {{user.id}} {{nope}} {{ agentId }}"


def test_custom_templates_and_identity_order(root, tmp_path):
    templates = tmp_path / "tpl"
    templates.mkdir()
    for name in ("notes.md", "heartbeat.md", "USER.md", "SOUL.md", "aaa.md"):
        (templates / name).write_text(f"{name} for {{{{agentName}}}}")
    agents = AgentStore(root, templates=templates)
    record = agents.create(owner_session(), name="Scout")
    names = [p.name for p in agents.identity_files("default", record.id)]
    assert names == ["SOUL.md", "USER.md", "heartbeat.md", "aaa.md", "notes.md"]
    assert (root.agent_dir("default", "scout") / "identity" / "aaa.md").read_text() == ("aaa.md for Scout")


def test_seat_ceiling(root):
    agents = AgentStore(root, max_agents_per_project=3)
    for i in range(3):
        agents.create(owner_session(), name=f"a{i}")
    with pytest.raises(SeatLimitReached) as info:
        agents.create(owner_session(), name="one too many")
    assert info.value.limit == 3
    assert "3" in str(info.value)
    assert "max_agents_per_project" in str(info.value)
    assert agents.count("default") == 3
    # System provisioning is exempt.
    system = create_system_session("bootstrap", "agent-core", owner_session())
    agents.create(system, name="seeded")
    assert agents.count("default") == 4


def test_role_priority_gate_on_provisioning(root):
    agents = AgentStore(root)
    member = SessionContext(user_id="bob", project_id="default", priority=30, agent_access="own")
    with pytest.raises(RolePriorityForbidden):
        agents.create(member, name="boss", role="admin")
    with pytest.raises(RolePriorityForbidden):
        agents.create(member, name="custom", role="lead", role_priority=29)
    agents.create(member, name="peer", role="member")
    agents.create(member, name="junior", role="viewer")
    assert [a.name for a in agents.list("default")] == ["peer", "junior"]


def test_failed_provision_leaves_nothing(root, tmp_path):
    bad = tmp_path / "bad-templates"
    bad.mkdir()
    (bad / "SOUL.md").write_bytes(b"\xff\xfe not utf-8")
    agents = AgentStore(root, templates=bad)
    with pytest.raises(UnicodeDecodeError):
        agents.create(owner_session(), name="broken")
    assert list((root.project_dir("default") / "agents").iterdir()) == []


def test_agents_list_oldest_first_then_by_name(root):
    agents = AgentStore(root)
    names = ["zed", "amy", "kit"]
    for n in names:
        agents.create(owner_session(), name=n)
    listed = agents.list("default")
    assert [a.name for a in listed] == names  # creation order
    # Equal timestamps fall back to the name.
    for a in listed:
        path = root.agent_dir("default", a.id) / "agent.json"
        doc = json.loads(path.read_text())
        doc["created_at"] = "2026-01-01T00:00:00+00:00"
        path.write_text(json.dumps(doc))
    assert [a.name for a in agents.list("default")] == ["amy", "kit", "zed"]


def test_agent_ids_are_unique_and_sentinels_refused(root):
    agents = AgentStore(root)
    assert agents.create(owner_session(), name="Helper").id == "helper"
    assert agents.create(owner_session(), name="helper").id == "helper-2"
    with pytest.raises(SentinelIdentityError):
        agents.create(owner_session(), name="x", agent_id="__system__")
    with pytest.raises(SentinelIdentityError):
        agents.create(owner_session(user="__system__"), name="x")
    with pytest.raises(SentinelIdentityError):
        agents.create(owner_session(project="__system__"), name="x")
