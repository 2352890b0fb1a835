from __future__ import annotations

import pytest

from neuralis_jupyter.contracts import (
    DEFAULT_ROLES,
    ESCALATION_ONLY,
    FEATURES,
    Requires,
    SessionContext,
    create_system_session,
    has_feature,
    meets_requires,
)

# The expected grants, transcribed from seed 000's "Default grants" paragraph, feature by feature.
READ_EXECUTE_TIER = [
    "core.agents",
    "core.execute",
    "core.observe",
    "core.web",
    "workflow.read",
    "workflow.write",
    "workflow.dispatch",
    "channels.connect",
    "mcp.connect",
    "git.connect",
    "credentials.self",
    "core.prompt-polish",
    "terminal.read",
    "exec.container",
]
ESCALATION = [
    "mcp.sidecar",
    "mcp.apps",
    "core.logs",
    "core.connectors",
    "exec.unconfined",
    "terminal.container",
    "terminal.supervise",
    "exec.host",
    "terminal.native",
    "channels.manage",
    "core.conversation.fork",
]
EXPECTED: dict[str, set[str]] = {
    "owner": set(READ_EXECUTE_TIER) | set(ESCALATION),
    "admin": set(READ_EXECUTE_TIER) | set(ESCALATION),
    "manager": set(READ_EXECUTE_TIER),
    "member": set(READ_EXECUTE_TIER) - {"workflow.dispatch"},
    "viewer": {"core.agents", "core.observe", "workflow.read"},
}


def session_for(role_name: str) -> SessionContext:
    role = DEFAULT_ROLES[role_name]
    return SessionContext(
        user_id="u",
        project_id="p",
        role=role_name,
        priority=role.priority,
        granted_features=role.granted_features,
    )


def test_taxonomy_is_the_seed_taxonomy():
    assert set(FEATURES) == set(READ_EXECUTE_TIER) | set(ESCALATION)
    assert set(ESCALATION_ONLY) == set(ESCALATION)
    for feature in FEATURES.values():
        assert feature.title
        assert feature.description


@pytest.mark.parametrize("role", sorted(EXPECTED))
@pytest.mark.parametrize("feature", READ_EXECUTE_TIER + ESCALATION)
def test_default_role_feature_table(role, feature):
    assert has_feature(session_for(role), feature) is (feature in EXPECTED[role])


def test_admin_enumerates_and_owner_uses_the_wildcard():
    assert "*" not in DEFAULT_ROLES["admin"].granted_features
    assert DEFAULT_ROLES["owner"].granted_features == ("*",)


def test_priorities_order_roles_strongest_first():
    order = sorted(DEFAULT_ROLES.values(), key=lambda r: r.priority)
    assert [r.name for r in order] == ["owner", "admin", "manager", "member", "viewer"]


def test_authorization_never_reads_the_role_name():
    # A session labelled 'owner' with viewer grants is a viewer; a custom label with grants has them.
    fake_owner = SessionContext(
        user_id="u", project_id="p", role="owner", priority=0, granted_features=("core.observe",)
    )
    assert not has_feature(fake_owner, "core.execute")
    custom = SessionContext(
        user_id="u", project_id="p", role="ops-bot", priority=25, granted_features=("exec.host",)
    )
    assert has_feature(custom, "exec.host")


@pytest.mark.parametrize("granted", [None, ()])
def test_no_grants_holds_nothing(granted):
    s = SessionContext(user_id="u", project_id="p", granted_features=granted)
    assert not any(has_feature(s, f) for f in FEATURES)
    assert not meets_requires(s, ["core.observe"])


def test_system_session_holds_every_feature():
    s = create_system_session("bootstrap", "agent-core")
    assert all(has_feature(s, f) for f in FEATURES)


def test_meets_requires_needs_every_feature():
    member = session_for("member")
    assert meets_requires(member, None)
    assert meets_requires(member, Requires(features=()))
    assert meets_requires(member, Requires(features=("core.execute", "core.web")))
    assert not meets_requires(member, Requires(features=("core.execute", "workflow.dispatch")))
    assert meets_requires(member, ["core.agents"])


def test_requires_from_json_validates():
    assert Requires.from_json({"features": ["a", "b"]}) == Requires(features=("a", "b"))
    assert Requires.from_json(None) is None
    with pytest.raises(ValueError, match=r"requires\.features"):
        Requires.from_json({"features": "core.web"})
