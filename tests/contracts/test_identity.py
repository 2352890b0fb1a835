from __future__ import annotations

import pickle
from dataclasses import fields

import pytest

from neuralis_jupyter.contracts import (
    SENTINEL_IDS,
    SESSION_FIELD_NAMES,
    SKILL_USER_ID,
    SYSTEM_AGENT_ID,
    SYSTEM_PROJECT_ID,
    SYSTEM_USER_ID,
    CrossPackageSession,
    SentinelIdentityError,
    SessionContext,
    SessionFieldInSchemaError,
    SystemSession,
    assert_not_sentinel,
    check_tool_input_schema,
    create_system_session,
)
from neuralis_jupyter.contracts.identity import IDENTITY_FIELDS

SEED_002_FIELDS = {
    "user_id",
    "project_id",
    "agent_id",
    "conversation_id",
    "request_id",
    "tool_use_id",
    "delegate_run_id",
    "delegate_mode",
    "role",
    "priority",
    "granted_features",
    "spend_limits",
    "llm_rate_limit_rpm",
    "agent_access",
    "agent_ownership",
}


def test_session_context_has_every_seed_field():
    assert {f.name for f in fields(SessionContext)} == SEED_002_FIELDS


def test_sentinel_constants():
    assert SYSTEM_USER_ID == SYSTEM_PROJECT_ID == SYSTEM_AGENT_ID == "__system__"
    assert SKILL_USER_ID == "__skill__"
    assert SKILL_USER_ID not in SENTINEL_IDS
    assert {"__system__"} == SENTINEL_IDS


@pytest.mark.parametrize("field_name", IDENTITY_FIELDS)
@pytest.mark.parametrize("sentinel", [SYSTEM_USER_ID, SYSTEM_PROJECT_ID, SYSTEM_AGENT_ID])
def test_sentinel_refused_in_every_identity_field(field_name, sentinel):
    base = {"user_id": "alice", "project_id": "p1"}
    session = SessionContext(**{**base, field_name: sentinel})
    with pytest.raises(SentinelIdentityError) as info:
        assert_not_sentinel(session)
    assert info.value.field_name == field_name
    assert field_name in str(info.value)


def test_identity_fields_cover_every_id_field_of_the_session():
    id_fields = {f.name for f in fields(SessionContext) if f.name.endswith("_id")}
    # tool_use_id is minted by the runtime, never taken from outside.
    assert id_fields - {"tool_use_id"} == set(IDENTITY_FIELDS)


def test_skill_user_is_not_a_sentinel_and_real_ids_pass():
    session = SessionContext(user_id=SKILL_USER_ID, project_id="p1", agent_id="a1")
    assert assert_not_sentinel(session) is session
    # Near-misses are ordinary ids.
    for near in ("__System__", "__system", "system", "__system__ "):
        assert_not_sentinel(SessionContext(user_id=near, project_id="p"))


def test_sentinel_error_survives_pickling():
    err = SentinelIdentityError("user_id", "__system__")
    again = pickle.loads(pickle.dumps(err))
    assert (again.field_name, again.value) == ("user_id", "__system__")


def test_system_session_only_through_factory():
    with pytest.raises(TypeError, match="create_system_session"):
        SystemSession(user_id="x", project_id="p", caller_package_id="evil", system_reason="bootstrap")
    session = create_system_session("sync-scheduler", "agent-core")
    assert session.is_system
    assert session.system_reason == "sync-scheduler"
    assert (session.user_id, session.project_id, session.agent_id) == ("__system__",) * 3
    assert session.priority is None


@pytest.mark.parametrize("reason", ["cron", "", "BOOTSTRAP", "admin", None])
def test_system_reason_is_a_closed_set(reason):
    with pytest.raises(ValueError, match="reason"):
        create_system_session(reason, "agent-core")


def test_system_session_scoped_to_a_real_project():
    scope = SessionContext(user_id="alice", project_id="p1", agent_id="a1")
    session = create_system_session("mcp-api-key", "agent-core", scope)
    assert (session.user_id, session.project_id, session.agent_id) == ("alice", "p1", "a1")
    assert assert_not_sentinel(session) is session


def test_unscoped_system_session_is_refused_at_an_external_boundary():
    with pytest.raises(SentinelIdentityError):
        assert_not_sentinel(create_system_session("bootstrap", "agent-core"))


def test_cross_package_session_carries_the_caller():
    s = CrossPackageSession(user_id="alice", project_id="p", caller_package_id="brain-core")
    assert s.caller_package_id == "brain-core"
    assert s.replace(agent_id="a").caller_package_id == "brain-core"


def test_replace_keeps_system_session_class():
    s = create_system_session("bootstrap", "agent-core")
    t = s.replace(conversation_id="c1")
    assert isinstance(t, SystemSession)
    assert t.conversation_id == "c1"


# -- tool input schemas -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SESSION_FIELD_NAMES))
def test_session_field_refused_at_schema_root(name):
    schema = {
        "type": "object",
        "properties": {"query": {"type": "string"}, name: {"type": "string"}},
    }
    with pytest.raises(SessionFieldInSchemaError) as info:
        check_tool_input_schema("search", schema)
    assert info.value.names == [name]
    assert "search" in str(info.value)


@pytest.mark.parametrize("name", sorted(SESSION_FIELD_NAMES))
def test_session_field_allowed_nested(name):
    schema = {
        "type": "object",
        "properties": {
            "filter": {"type": "object", "properties": {name: {"type": "string"}}},
            "items": {"type": "array", "items": {"type": "object", "properties": {name: {}}}},
        },
    }
    check_tool_input_schema("search", schema)


@pytest.mark.parametrize("combinator", ["allOf", "anyOf", "oneOf"])
def test_session_field_refused_in_root_combinator_branch(combinator):
    schema = {combinator: [{"properties": {"q": {}}}, {"properties": {"userId": {}}}]}
    with pytest.raises(SessionFieldInSchemaError):
        check_tool_input_schema("t", schema)


def test_every_camel_and_snake_form_is_banned():
    for f in SEED_002_FIELDS:
        assert f in SESSION_FIELD_NAMES
    for camel in ("userId", "projectId", "agentId", "grantedFeatures", "toolUseId", "session"):
        assert camel in SESSION_FIELD_NAMES
