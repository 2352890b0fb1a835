"""Every provision-time placeholder of seed 000, through a custom identity template folder."""

from __future__ import annotations

import pytest

from neuralis_jupyter.contracts import SessionContext
from neuralis_jupyter.store.agents import AgentStore
from neuralis_jupyter.store.paths import DataRoot

TEMPLATE = """\
agent={{agentId}}
name={{agentName}}
role={{role}}
created={{createdAt}}
package={{packageId}}
member={{memberSlug}}
project={{projectId}}
user={{userId}}
"""


@pytest.fixture
def root(tmp_path):
    return DataRoot(tmp_path / "root")


@pytest.fixture
def templates(tmp_path):
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "SOUL.md").write_text(TEMPLATE, encoding="utf-8")
    (folder / "TEAM.md").write_text("I am {{memberSlug}} of {{packageId}}.\n", encoding="utf-8")
    return folder


def session(user="bob", project="lab"):
    return SessionContext(user_id=user, project_id=project, priority=0, granted_features=("*",))


def rendered(root, record, name):
    return (root.agent_dir(record.project_id, record.id) / "identity" / name).read_text(encoding="utf-8")


def test_every_placeholder_is_substituted_at_provision_time(root, templates):
    agents = AgentStore(root, templates=templates)
    # An explicit id unlike the name: memberSlug is the slug of the NAME, agentId the id.
    record = agents.create(session(), name="  Data Wrangler (v2)! ", agent_id="dw-1", role="member")
    assert rendered(root, record, "SOUL.md") == (
        "agent=dw-1\n"
        "name=Data Wrangler (v2)!\n"
        "role=member\n"
        f"created={record.created_at}\n"
        "package=agent-core\n"
        "member=data-wrangler-v2\n"
        "project=lab\n"
        "user=bob\n"
    )
    assert rendered(root, record, "TEAM.md") == "I am data-wrangler-v2 of agent-core.\n"


def test_member_slug_follows_each_agents_own_name(root, templates):
    agents = AgentStore(root, templates=templates)
    first = agents.create(session(user="alice", project="default"), name="Field Scout")
    second = agents.create(session(user="alice", project="default"), name="Field Scout")
    plain = agents.create(session(user="alice", project="default"), name="Reviewer")
    # Both scouts share a name, hence a member slug, while their ids differ.
    assert (first.id, second.id) == ("field-scout", "field-scout-2")
    for record in (first, second):
        assert "member=field-scout\n" in rendered(root, record, "SOUL.md")
        assert f"agent={record.id}\n" in rendered(root, record, "SOUL.md")
    assert rendered(root, plain, "TEAM.md") == "I am reviewer of agent-core.\n"
    assert "role=assistant\n" in rendered(root, plain, "SOUL.md")  # no role: the default label
