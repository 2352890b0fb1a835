"""Usage and audit stores through the Store facade, on a real SQLite file."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.contracts import (
    SYSTEM_AGENT_ID,
    SYSTEM_PROJECT_ID,
    SYSTEM_USER_ID,
    SentinelIdentityError,
    SessionContext,
    create_system_session,
)
from neuralis_jupyter.store import AuditEvent, Store
from neuralis_jupyter.store.conversations import ConversationStore
from neuralis_jupyter.store.migrations import pending_migrations, usage_events
from neuralis_jupyter.store.sql import dispose_engines
from neuralis_jupyter.store.usage import USAGE_COLUMNS, select_usage

from .usage_rows import T0
from .usage_rows import usage_event as event


@pytest.fixture
def store(tmp_path):
    yield Store.open(tmp_path / "root")
    dispose_engines()


def test_store_open_puts_the_sql_file_in_the_data_root_and_migrates_on_first_use(tmp_path):
    store = Store.open(tmp_path / "root")
    try:
        assert store.data_root.root == (tmp_path / "root").resolve()
        assert not (tmp_path / "root" / "neuralis.db").exists()  # nothing opened yet
        assert pending_migrations(store.engine) == []
        assert (tmp_path / "root" / "neuralis.db").is_file()
        assert isinstance(store.conversations, ConversationStore)
        assert store.conversations.root.root == store.data_root.root
        assert "neuralis.db" in repr(store)
    finally:
        dispose_engines()


def test_store_takes_its_paths_from_settings(tmp_path):
    settings = NeuralisSettings(data_root=str(tmp_path / "r"), store_url=f"sqlite:///{tmp_path / 'x.db'}")
    store = Store(settings)
    try:
        store.usage.record(event())
        assert (tmp_path / "x.db").is_file()
        assert store.data_root.root == tmp_path / "r"
    finally:
        dispose_engines()


def test_repr_hides_a_database_password(tmp_path):
    store = Store.open(tmp_path, store_url="postgresql+psycopg://neuralis:s3cret@db/neuralis")
    assert "s3cret" not in repr(store)


def test_the_store_package_exports_its_public_names():
    import neuralis_jupyter.store as store_package

    expected = {"Store", "UsageEvent", "AuditEvent", "StoreError", "InvalidId", "NotFound", "NotAMember"}
    expected |= {"SeatLimitReached", "AlreadyExists", "StoreCorrupt"}
    assert expected <= set(store_package.__all__)
    assert all(hasattr(store_package, name) for name in store_package.__all__)


def test_usage_event_fields_are_the_table_columns_in_order():
    assert tuple(c.name for c in usage_events.columns if c.name != "id") == USAGE_COLUMNS


def test_usage_event_refuses_a_naive_timestamp():
    with pytest.raises(ValueError, match="timezone-aware"):
        event(ts=datetime(2026, 11, 29, 10, 0))  # noqa: DTZ001 (the point of the test)
    with pytest.raises(TypeError, match="must be a datetime"):
        event(ts="2026-11-29T10:00:00+00:00")


def test_usage_events_round_trip(store):
    paris = timezone(timedelta(hours=1))
    events = [
        event(),
        event(
            ts=datetime(2026, 11, 29, 12, 30, 0, 999_999, tzinfo=paris),
            agent_id=None,
            conversation_id=None,
            request_id="r2",
            equivalent_cost_usd=0.9,
        ),
    ]
    assert store.usage.record_many(events) == 2
    assert store.usage.record_many([]) == 0
    got = store.usage.list()
    assert got == events  # aware datetimes compare by instant
    assert all(e.ts.tzinfo is UTC for e in got)
    assert got[1].ts == datetime(2026, 11, 29, 11, 30, 0, 999_999, tzinfo=UTC)


def test_usage_list_filters_and_orders_by_time(store):
    store.usage.record_many(
        [
            event(ts=T0 + timedelta(minutes=2), request_id="late"),
            event(ts=T0, request_id="early"),
            event(ts=T0 + timedelta(minutes=1), project_id="q", request_id="other-project"),
            event(ts=T0 + timedelta(minutes=1), user_id="bob", agent_id="a2", request_id="bob"),
            event(ts=T0 + timedelta(minutes=1), conversation_id="c-2", request_id="c2"),
        ]
    )

    def ids(**filters):
        return [e.request_id for e in store.usage.list(**filters)]

    assert ids() == ["early", "other-project", "bob", "c2", "late"]
    assert ids(project_id="p") == ["early", "bob", "c2", "late"]
    assert ids(user_id="bob") == ["bob"]
    assert ids(agent_id="a2") == ["bob"]
    assert ids(conversation_id="c-2") == ["c2"]
    assert ids(since=T0 + timedelta(minutes=1)) == ["other-project", "bob", "c2", "late"]  # inclusive
    assert ids(until=T0 + timedelta(minutes=1)) == ["early"]  # exclusive
    with pytest.raises(ValueError, match="since must be timezone-aware"):
        store.usage.list(since=datetime(2026, 1, 1))  # noqa: DTZ001


def test_spend_sums_costs_since_an_instant_per_project_user_and_agent(store):
    store.usage.record_many(
        [
            event(ts=T0 - timedelta(seconds=1), cost_usd=100.0),  # before the window
            event(ts=T0, cost_usd=1.0),  # at the boundary: counted
            event(ts=T0 + timedelta(hours=1), user_id="bob", cost_usd=2.0),
            event(ts=T0 + timedelta(hours=2), agent_id="a2", cost_usd=4.0),
            event(ts=T0 + timedelta(hours=3), project_id="q", cost_usd=8.0),
        ]
    )
    assert store.usage.spend("p", since=T0) == pytest.approx(7.0)
    assert store.usage.spend("p", since=T0, user_id="alice") == pytest.approx(5.0)
    assert store.usage.spend("p", since=T0, agent_id="a2") == pytest.approx(4.0)
    assert store.usage.spend("p", since=T0, user_id="bob", agent_id="a2") == 0.0
    assert store.usage.spend("nobody", since=T0) == 0.0
    with pytest.raises(ValueError, match="naive"):
        store.usage.spend("p", since=datetime(2026, 11, 29))  # noqa: DTZ001


def test_the_project_spend_check_reads_only_the_index(store):
    # The check runs before every model call; it must not scan the table.
    stmt = "SELECT sum(cost_usd) FROM usage_events WHERE project_id = 'p' AND ts >= 0"
    with store.engine.connect() as conn:
        plan = " ".join(row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {stmt}"))
    assert "COVERING INDEX ix_usage_events_project_ts" in plan
    # And the frames filters use their indexes.
    for column, index in (("user_id", "user_ts"), ("agent_id", "agent_ts")):
        sql = str(select_usage(**{column: "x"}).compile(store.engine, compile_kwargs={"literal_binds": True}))
        with store.engine.connect() as conn:
            plan = " ".join(row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
        assert f"ix_usage_events_{index}" in plan


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            st.integers(min_value=-3600, max_value=3600),
            st.floats(min_value=0, max_value=50, allow_nan=False),
            st.sampled_from(["alice", "bob"]),
        ),
        max_size=25,
    ),
    since_offset=st.integers(min_value=-3600, max_value=3600),
)
def test_spend_equals_the_sum_of_recorded_costs_in_the_window(store, rows, since_offset):
    project = "p-" + uuid.uuid4().hex[:8]  # a fresh project per example on the one store
    store.usage.record_many(
        event(ts=T0 + timedelta(seconds=s), project_id=project, cost_usd=c, user_id=u) for s, c, u in rows
    )
    since = T0 + timedelta(seconds=since_offset)
    expected = math.fsum(c for s, c, _ in rows if s >= since_offset)
    assert store.usage.spend(project, since=since) == pytest.approx(expected, abs=1e-9)
    expected_bob = math.fsum(c for s, c, u in rows if s >= since_offset and u == "bob")
    assert store.usage.spend(project, since=since, user_id="bob") == pytest.approx(expected_bob, abs=1e-9)


def audit(**overrides):
    values = {
        "ts": T0,
        "project_id": "p",
        "user_id": "alice",
        "agent_id": "a1",
        "conversation_id": "c-1",
        "request_id": "r1",
        "action": "tool.denied",
        "subject": "execute",
        "arm": "guard.safe",
        "outcome": "denied",
        "reason": "the safe guard profile refuses shell commands",
        "details": {"command": "rm -rf /", "nested": {"n": [1, 2]}},
    }
    return AuditEvent(**{**values, **overrides})


def test_audit_events_round_trip_with_json_details(store):
    first = audit()
    minimal = AuditEvent(project_id="p", user_id="bob", action="agent.create", outcome="ok")
    store.audit.record(first)
    store.audit.record(minimal)
    got = store.audit.list("p")
    assert got == [minimal, first]  # newest first; the minimal event defaulted to now
    assert minimal.ts.tzinfo is UTC
    assert got[1].details == {"command": "rm -rf /", "nested": {"n": [1, 2]}}
    assert got[0].agent_id is None
    assert got[0].details is None


def test_audit_list_filters_newest_first_with_a_limit(store):
    for i in range(5):
        store.audit.record(audit(ts=T0 + timedelta(minutes=i), request_id=f"r{i}"))
    store.audit.record(audit(ts=T0, project_id="q", request_id="q"))
    store.audit.record(audit(ts=T0, user_id="bob", request_id="bob"))
    store.audit.record(audit(ts=T0, action="tool.allowed", request_id="allowed"))

    def ids(*args, **kwargs):
        return [e.request_id for e in store.audit.list(*args, **kwargs)]

    assert ids("p", user_id="alice", action="tool.denied") == ["r4", "r3", "r2", "r1", "r0"]
    assert ids("p", limit=2) == ["r4", "r3"]
    assert ids("q") == ["q"]
    assert ids(user_id="bob") == ["bob"]
    assert ids(action="tool.allowed") == ["allowed"]
    assert ids("p", since=T0 + timedelta(minutes=3)) == ["r4", "r3"]
    assert len(ids()) == 8
    with pytest.raises(ValueError, match="naive"):
        store.audit.list(since=datetime(2026, 1, 1))  # noqa: DTZ001
    with pytest.raises(ValueError, match="naive"):
        audit(ts=datetime(2026, 1, 1))  # noqa: DTZ001


# -- sentinel ids are never persisted (seed 002) --------------------------------------------------------

ID_COLUMNS = ["project_id", "user_id", "agent_id", "conversation_id", "request_id"]


@pytest.mark.parametrize("column", ID_COLUMNS)
def test_usage_writes_refuse_a_sentinel_id(store, column):
    with pytest.raises(SentinelIdentityError) as refused:
        store.usage.record(event(**{column: SYSTEM_USER_ID}))
    assert refused.value.field_name == column
    with pytest.raises(SentinelIdentityError, match=column):
        store.usage.insert(event(**{column: SYSTEM_PROJECT_ID}))
    row_id = store.usage.insert(event())
    with pytest.raises(SentinelIdentityError, match=column):
        store.usage.update(row_id, event(**{column: SYSTEM_AGENT_ID}, cost_usd=99.0))
    with pytest.raises(SentinelIdentityError, match=column):  # one bad event refuses the whole batch
        store.usage.record_many([event(request_id="fine"), event(**{column: SYSTEM_USER_ID})])
    assert store.usage.list() == [event()]


@pytest.mark.parametrize("column", ID_COLUMNS)
def test_audit_writes_refuse_a_sentinel_id(store, column):
    with pytest.raises(SentinelIdentityError) as refused:
        store.audit.record(audit(**{column: SYSTEM_USER_ID}))
    assert refused.value.field_name == column
    assert store.audit.list() == []


def test_audit_keeps_system_work_on_a_real_project(store):
    scope = SessionContext(user_id="alice", project_id="p", agent_id="a1", request_id="r1")
    system = create_system_session("bootstrap", "agent-core", scope)
    row = audit(
        project_id=system.project_id,
        user_id=system.user_id,
        agent_id=system.agent_id,
        conversation_id=system.conversation_id,
        request_id=system.request_id,
        action="agent.create",
    )
    store.audit.record(row)
    assert store.audit.list("p") == [row]
    unscoped = create_system_session("bootstrap", "agent-core")
    with pytest.raises(SentinelIdentityError, match="project_id"):
        store.audit.record(audit(project_id=unscoped.project_id, user_id=unscoped.user_id))
