"""frames: usage, spend and transcript DataFrames over a real store in tmp_path."""

from __future__ import annotations

import math
import subprocess
import sys
import uuid
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuralis_jupyter import frames
from neuralis_jupyter.store import NotFound, Store, UsageEvent
from neuralis_jupyter.store.sql import dispose_engines, open_engine

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)  # a Sunday

USAGE_DTYPES = {
    "ts": pd.DatetimeTZDtype("us", UTC),
    "project_id": pd.StringDtype(),
    "user_id": pd.StringDtype(),
    "agent_id": pd.StringDtype(),
    "conversation_id": pd.StringDtype(),
    "request_id": pd.StringDtype(),
    "provider": pd.StringDtype(),
    "model": pd.StringDtype(),
    "input_tokens": np.dtype("int64"),
    "output_tokens": np.dtype("int64"),
    "cache_read_tokens": np.dtype("int64"),
    "cache_write_tokens": np.dtype("int64"),
    "steps": np.dtype("int64"),
    "cost_usd": np.dtype("float64"),
    "equivalent_cost_usd": np.dtype("float64"),
    "duration_ms": np.dtype("int64"),
}
TRANSCRIPT_DTYPES = {
    "seq": np.dtype("int64"),
    "ts": pd.DatetimeTZDtype("us", UTC),
    "role": pd.StringDtype(),
    "kind": pd.StringDtype(),
    "text": pd.StringDtype(),
    "tool_name": pd.StringDtype(),
    "tool_use_id": pd.StringDtype(),
    "is_error": pd.BooleanDtype(),
    "outcome": pd.StringDtype(),
}


@pytest.fixture
def store(tmp_path):
    yield Store.open(tmp_path / "root")
    dispose_engines()


def event(**overrides):
    values = {
        "ts": T0,
        "project_id": "p",
        "user_id": "alice",
        "agent_id": "a1",
        "conversation_id": "c-1",
        "request_id": "r1",
        "provider": "anthropic",
        "model": "claude-x",
        "input_tokens": 1000,
        "output_tokens": 100,
        "cache_read_tokens": 10,
        "cache_write_tokens": 1,
        "steps": 1,
        "cost_usd": 0.5,
        "duration_ms": 900,
    }
    return UsageEvent(**{**values, **overrides})


def assert_dtypes(df, expected):
    assert list(df.columns) == list(expected)
    assert df.dtypes.to_dict() == expected


# -- usage -------------------------------------------------------------------------------------------


def test_usage_round_trips_values_and_dtypes(store):
    later = T0 + timedelta(microseconds=1)
    store.usage.record_many(
        [event(ts=later, request_id="r2", agent_id=None, equivalent_cost_usd=2.25), event()]
    )
    df = frames.usage(store=store)
    assert_dtypes(df, USAGE_DTYPES)
    assert df.attrs["pricing_basis"] == frames.PRICING_BASIS
    assert df["request_id"].tolist() == ["r1", "r2"]  # oldest first
    assert df["ts"].tolist() == [pd.Timestamp(T0), pd.Timestamp(later)]
    first = df.iloc[0]
    assert first.drop(["ts", "equivalent_cost_usd"]).to_dict() == {
        "project_id": "p",
        "user_id": "alice",
        "agent_id": "a1",
        "conversation_id": "c-1",
        "request_id": "r1",
        "provider": "anthropic",
        "model": "claude-x",
        "input_tokens": 1000,
        "output_tokens": 100,
        "cache_read_tokens": 10,
        "cache_write_tokens": 1,
        "steps": 1,
        "cost_usd": 0.5,
        "duration_ms": 900,
    }
    assert math.isnan(first.equivalent_cost_usd)
    assert df.loc[1, "agent_id"] is pd.NA
    assert df.loc[1, "equivalent_cost_usd"] == 2.25


def test_usage_filters_select_the_right_rows(store):
    store.usage.record_many(
        [
            event(ts=T0, request_id="a"),
            event(ts=T0 + timedelta(hours=1), project_id="q", request_id="b"),
            event(ts=T0 + timedelta(hours=2), user_id="bob", request_id="c"),
            event(ts=T0 + timedelta(days=1), agent_id="a2", request_id="d"),
            event(ts=T0 + timedelta(days=2), conversation_id="c-9", request_id="e"),
        ]
    )

    def ids(**filters):
        return frames.usage(store=store, **filters)["request_id"].tolist()

    assert ids(project="p") == ["a", "c", "d", "e"]
    assert ids(user="bob") == ["c"]
    assert ids(agent="a2") == ["d"]
    assert ids(conversation="c-9") == ["e"]
    assert ids(project="p", user="alice", agent="a1") == ["a", "e"]
    assert ids(since=T0 + timedelta(hours=1)) == ["b", "c", "d", "e"]
    assert ids(until=T0 + timedelta(hours=1)) == ["a"]
    # A date is midnight UTC; an ISO string may carry any offset.
    assert ids(since=date(2026, 11, 30), until=date(2026, 12, 1)) == ["d"]
    assert ids(since="2026-11-30") == ["d", "e"]
    assert ids(until="2026-11-29T12:30:00+01:00") == ["a", "b"]  # 11:30 UTC
    assert ids(since="2026-11-29T11:00:00Z", until="2026-11-29T12:00:00Z") == ["b"]


@pytest.mark.parametrize(
    "bad",
    [datetime(2026, 11, 29), "2026-11-29T10:00:00", pd.Timestamp("2026-11-29 10:00")],  # noqa: DTZ001
)
def test_usage_refuses_naive_instants(store, bad):
    with pytest.raises(ValueError, match="naive"):
        frames.usage(since=bad, store=store)


def test_usage_refuses_unparsable_instants(store):
    with pytest.raises(ValueError, match="ISO 8601"):
        frames.usage(until="last tuesday", store=store)


def test_an_empty_result_keeps_every_column_and_dtype(store):
    df = frames.usage(store=store)
    assert len(df) == 0
    assert_dtypes(df, USAGE_DTYPES)
    store.usage.record(event())
    assert len(frames.usage(project="nobody", store=store)) == 0
    assert_dtypes(frames.usage(project="nobody", store=store), USAGE_DTYPES)


def test_store_may_be_an_engine_a_url_or_the_configured_default(tmp_path, neuralis_home):
    url = f"sqlite:///{tmp_path / 'by-url.db'}"
    # A URL or an Engine on a fresh file: migrated on the way in.
    assert len(frames.usage(store=url)) == 0
    Store.open(tmp_path, store_url=url).usage.record(event())
    assert frames.usage(store=open_engine(url))["request_id"].tolist() == ["r1"]
    # No store: the configured one, here $NEURALIS_HOME from conftest.
    Store.open(neuralis_home).usage.record(event(request_id="home"))
    assert frames.usage()["request_id"].tolist() == ["home"]
    with pytest.raises(TypeError, match="Store, an Engine or a URL"):
        frames.usage(store=42)
    dispose_engines()


def test_importing_frames_loads_neither_pandas_nor_sqlalchemy():
    code = (
        "import sys, neuralis_jupyter.frames; "
        "print(sorted(m for m in ('pandas', 'numpy', 'sqlalchemy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- spend -------------------------------------------------------------------------------------------


def test_spend_groups_by_model_and_day_with_the_pricing_basis(store):
    store.usage.record_many(
        [
            event(ts=T0, model="claude-x", cost_usd=1.0, input_tokens=10),
            # 00:00 the next day
            event(ts=T0 + timedelta(hours=14), model="claude-x", cost_usd=2.0, input_tokens=20),
            event(ts=T0 + timedelta(hours=1), model="claude-y", cost_usd=4.0, input_tokens=40),
            event(ts=T0 + timedelta(hours=2), model="claude-x", cost_usd=8.0, input_tokens=80),
        ]
    )
    df = frames.spend(store=store)
    assert df.attrs["pricing_basis"] == frames.PRICING_BASIS
    assert list(df.columns) == [
        "model",
        "period",
        "cost_usd",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "events",
    ]
    assert df["period"].dtype == pd.DatetimeTZDtype("us", UTC)
    assert df["model"].dtype == pd.StringDtype()
    assert df["input_tokens"].dtype == np.dtype("int64")
    day = pd.Timestamp("2026-11-29", tz=UTC)
    next_day = pd.Timestamp("2026-11-30", tz=UTC)
    assert df[["model", "period", "cost_usd", "input_tokens", "events"]].to_dict("records") == [
        {"model": "claude-x", "period": day, "cost_usd": 9.0, "input_tokens": 90, "events": 2},
        {"model": "claude-x", "period": next_day, "cost_usd": 2.0, "input_tokens": 20, "events": 1},
        {"model": "claude-y", "period": day, "cost_usd": 4.0, "input_tokens": 40, "events": 1},
    ]


def test_spend_weeks_start_monday_and_months_on_the_first(store):
    store.usage.record_many(
        [
            event(ts=datetime(2026, 11, 29, 23, 59, tzinfo=UTC), cost_usd=1.0),  # Sunday
            event(ts=datetime(2026, 11, 30, 0, 0, tzinfo=UTC), cost_usd=2.0),  # Monday
            event(ts=datetime(2026, 12, 6, 23, 0, tzinfo=UTC), cost_usd=4.0),  # the Sunday after
        ]
    )
    weeks = frames.spend(by=(), period="week", store=store)
    assert weeks["period"].tolist() == [
        pd.Timestamp("2026-11-23", tz=UTC),
        pd.Timestamp("2026-11-30", tz=UTC),
    ]
    assert weeks["cost_usd"].tolist() == [1.0, 6.0]
    months = frames.spend(by="project_id", period="month", store=store)
    assert months[["project_id", "period", "cost_usd"]].to_dict("records") == [
        {"project_id": "p", "period": pd.Timestamp("2026-11-01", tz=UTC), "cost_usd": 3.0},
        {"project_id": "p", "period": pd.Timestamp("2026-12-01", tz=UTC), "cost_usd": 4.0},
    ]


def test_spend_keeps_events_with_a_missing_group_value(store):
    store.usage.record_many([event(agent_id=None, cost_usd=1.5), event(agent_id="a1", cost_usd=2.5)])
    df = frames.spend(by=("agent_id",), store=store)
    assert df["cost_usd"].sum() == 4.0
    assert df["agent_id"].isna().sum() == 1


def test_spend_filters_by_project_and_window(store):
    store.usage.record_many(
        [
            event(cost_usd=1.0),
            event(project_id="q", cost_usd=2.0),
            event(ts=T0 + timedelta(days=3), cost_usd=4.0),
        ]
    )
    assert frames.spend(project="p", store=store)["cost_usd"].sum() == 5.0
    assert frames.spend(project="p", until="2026-11-30", store=store)["cost_usd"].sum() == 1.0
    assert frames.spend(since=date(2026, 12, 1), store=store)["cost_usd"].tolist() == [4.0]


def test_spend_on_no_usage_keeps_its_columns(store):
    df = frames.spend(by=("model", "user_id"), store=store)
    assert len(df) == 0
    assert list(df.columns)[:3] == ["model", "user_id", "period"]
    assert df["period"].dtype == pd.DatetimeTZDtype("us", UTC)
    assert df.attrs["pricing_basis"] == frames.PRICING_BASIS


def test_spend_refuses_unknown_groupings_and_periods(store):
    with pytest.raises(ValueError, match="cost_usd") as info:
        frames.spend(by=("model", "cost_usd"), store=store)
    for name in frames.SPEND_BY:
        assert name in str(info.value)
    with pytest.raises(ValueError, match="period"):
        frames.spend(period="hour", store=store)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=90 * 24 * 3600),
            st.floats(min_value=0, max_value=100, allow_nan=False),
            st.sampled_from(["claude-x", "claude-y", "gpt-z"]),
            st.sampled_from([None, "a1", "a2"]),
        ),
        min_size=1,
        max_size=30,
    ),
    by=st.sampled_from([(), ("model",), ("agent_id",), ("model", "agent_id")]),
    period=st.sampled_from(["day", "week", "month"]),
)
def test_spend_totals_equal_the_recorded_costs(store, rows, by, period):
    project = "p-" + uuid.uuid4().hex[:8]  # a fresh project per example on the one store
    store.usage.record_many(
        event(ts=T0 + timedelta(seconds=s), project_id=project, cost_usd=c, model=m, agent_id=a)
        for s, c, m, a in rows
    )
    df = frames.spend(by=by, period=period, project=project, store=store)
    assert df["cost_usd"].sum() == pytest.approx(math.fsum(c for _, c, _, _ in rows), abs=1e-9)
    assert df["events"].sum() == len(rows)
    assert df["input_tokens"].sum() == 1000 * len(rows)
    # Every period is a UTC midnight at the start of its day, week (Monday) or month.
    periods = df["period"]
    assert (periods == periods.dt.floor("D")).all()
    if period == "week":
        assert (periods.dt.day_of_week == 0).all()
    if period == "month":
        assert (periods.dt.day == 1).all()


# -- transcript --------------------------------------------------------------------------------------


def write_conversation(store, *, agent="a1", conversation_id="c-1"):
    conv = store.conversations.create(
        project_id="default", agent_id=agent, user_id="alice", conversation_id=conversation_id
    )
    conv.append_many(
        [
            {
                "ts": "2026-11-29T10:00:00.000000+00:00",
                "role": "user",
                "content": [{"type": "text", "text": "hi"}],
                "user_id": "alice",
                "request_id": "r1",
            },
            {
                "ts": "2026-11-29T10:00:01.250000+00:00",
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Running two cells."},
                    {"type": "tool_use", "id": "toolu_1", "name": "python", "input": {"code": "1+1"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "python", "input": {"code": "x"}},
                ],
                "model": "claude-x",
                "step": 1,
            },
            {
                "ts": "2026-11-29T10:00:02.000000+00:00",
                "role": "tool",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "name": "python",
                        "content": "2",
                        "is_error": False,
                        "outcome": "ok",
                    }
                ],
                "step": 1,
            },
            {
                "ts": "2026-11-29T10:00:05.000000+00:00",
                "role": "event",
                "content": [{"type": "background_report", "text": "exit 0 after 3 s"}],
            },
        ]
    )
    # The second parallel result arrives: the tool row (seq 3) is appended again, merged; last wins.
    conv.replace(
        3,
        {
            "ts": "2026-11-29T10:00:02.000000+00:00",
            "role": "tool",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "name": "python",
                    "content": "2",
                    "is_error": False,
                    "outcome": "ok",
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "name": "python",
                    "content": [
                        {"type": "text", "text": "NameError: name 'x' is not defined"},
                        {"type": "text", "text": "(cell 2)"},
                    ],
                    "is_error": True,
                    "outcome": "error",
                },
            ],
            "step": 1,
        },
    )
    return conv


def test_transcript_has_one_row_per_content_block_with_last_wins(store):
    write_conversation(store)
    df = frames.transcript("c-1", project="default", agent="a1", store=store)
    assert_dtypes(df, TRANSCRIPT_DTYPES)
    rows = df.astype(object).where(df.notna(), None).to_dict("records")
    ts = [r.pop("ts") for r in rows]
    assert ts[0] == pd.Timestamp("2026-11-29T10:00:00", tz=UTC)
    assert ts[1] == pd.Timestamp("2026-11-29T10:00:01.25", tz=UTC)
    assert rows == [
        {
            "seq": 1,
            "role": "user",
            "kind": "text",
            "text": "hi",
            "tool_name": None,
            "tool_use_id": None,
            "is_error": None,
            "outcome": None,
        },
        {
            "seq": 2,
            "role": "assistant",
            "kind": "text",
            "text": "Running two cells.",
            "tool_name": None,
            "tool_use_id": None,
            "is_error": None,
            "outcome": None,
        },
        {
            "seq": 2,
            "role": "assistant",
            "kind": "tool_use",
            "text": '{"code":"1+1"}',
            "tool_name": "python",
            "tool_use_id": "toolu_1",
            "is_error": None,
            "outcome": None,
        },
        {
            "seq": 2,
            "role": "assistant",
            "kind": "tool_use",
            "text": '{"code":"x"}',
            "tool_name": "python",
            "tool_use_id": "toolu_2",
            "is_error": None,
            "outcome": None,
        },
        {
            "seq": 3,
            "role": "tool",
            "kind": "tool_result",
            "text": "2",
            "tool_name": "python",
            "tool_use_id": "toolu_1",
            "is_error": False,
            "outcome": "ok",
        },
        {
            "seq": 3,
            "role": "tool",
            "kind": "tool_result",
            "text": "NameError: name 'x' is not defined\n(cell 2)",
            "tool_name": "python",
            "tool_use_id": "toolu_2",
            "is_error": True,
            "outcome": "error",
        },
        {
            "seq": 4,
            "role": "event",
            "kind": "background_report",
            "text": "exit 0 after 3 s",
            "tool_name": None,
            "tool_use_id": None,
            "is_error": None,
            "outcome": None,
        },
    ]


def test_transcript_finds_the_conversation_in_any_agent_of_the_default_project(store):
    store.conversations.create(project_id="default", agent_id="a0", user_id="alice", conversation_id="c-0")
    write_conversation(store, agent="a2", conversation_id="c-7")
    df = frames.transcript("c-7", store=store)
    assert df["seq"].tolist() == [1, 2, 2, 2, 3, 3, 4]


def test_transcript_reads_a_fork_by_its_id(store):
    source = write_conversation(store)
    fork = store.conversations.fork(source, user_id="alice", up_to_seq=2, fork_id="c-fork")
    assert fork.id == "c-fork"
    assert frames.transcript("c-fork", store=store)["seq"].tolist() == [1, 2, 2, 2]


def test_transcript_of_an_unknown_conversation_is_not_found(store):
    write_conversation(store)
    with pytest.raises(NotFound, match="c-missing"):
        frames.transcript("c-missing", store=store)
    with pytest.raises(NotFound):
        frames.transcript("c-1", agent="a-other", store=store)
    with pytest.raises(NotFound):
        frames.transcript("c-1", project="elsewhere", store=store)


def test_an_empty_transcript_keeps_its_columns(store):
    store.conversations.create(project_id="default", agent_id="a1", user_id="alice", conversation_id="c-e")
    df = frames.transcript("c-e", store=store)
    assert len(df) == 0
    assert_dtypes(df, TRANSCRIPT_DTYPES)


def test_transcript_uses_the_configured_store_by_default(neuralis_home):
    write_conversation(Store.open(neuralis_home))
    assert len(frames.transcript("c-1")) == 7
