"""The SQL engine and migrations, against real SQLite files and real concurrent processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from neuralis_jupyter.store import migrations
from neuralis_jupyter.store.migrations import (
    MIGRATIONS,
    from_micros,
    migrate,
    pending_migrations,
    schema_version,
    to_micros,
)
from neuralis_jupyter.store.sql import BUSY_TIMEOUT_MS, dispose_engines, open_engine

ALL_NAMES = [m.__name__ for m in MIGRATIONS]


@pytest.fixture(autouse=True)
def _close_engines():
    yield
    dispose_engines()


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'nested' / 'dir' / 'neuralis.db'}"


def pragma(conn, name):
    return conn.exec_driver_sql(f"PRAGMA {name}").scalar()


def test_open_engine_creates_the_parent_directory_and_caches_per_url(tmp_path, url):
    engine = open_engine(url)
    assert (tmp_path / "nested" / "dir").is_dir()
    assert open_engine(url) is engine
    assert open_engine(f"sqlite:///{tmp_path / 'other.db'}") is not engine


def test_dispose_engines_forgets_the_cached_engine(url):
    engine = open_engine(url)
    dispose_engines()
    assert open_engine(url) is not engine


def test_every_sqlite_connection_is_tuned_for_two_writing_processes(url):
    engine = open_engine(url)
    # Two connections held at once: the pool opens a second DBAPI connection, tuned the same way.
    with engine.connect() as first, engine.connect() as second:
        for conn in (first, second):
            assert pragma(conn, "journal_mode") == "wal"
            assert pragma(conn, "busy_timeout") == BUSY_TIMEOUT_MS
            assert pragma(conn, "synchronous") == 1  # NORMAL
            assert pragma(conn, "foreign_keys") == 1


def test_ddl_runs_inside_the_transaction(url):
    # sqlite3's legacy mode would autocommit the CREATE; ours rolls it back with the transaction.
    engine = open_engine(url)
    with engine.connect() as conn:
        transaction = conn.begin()
        conn.exec_driver_sql("CREATE TABLE scratch (x INTEGER)")
        transaction.rollback()
    assert not sa.inspect(engine).has_table("scratch")


def test_unknown_begin_mode_is_refused(url):
    engine = open_engine(url)
    with (
        pytest.raises(ValueError, match="sqlite_begin"),
        engine.connect().execution_options(sqlite_begin="SOMETIMES") as conn,
    ):
        conn.exec_driver_sql("SELECT 1")


def test_a_fresh_database_has_schema_version_zero_and_everything_pending(url):
    engine = open_engine(url)
    assert schema_version(engine) == 0
    assert pending_migrations(engine) == ALL_NAMES


def test_migrate_applies_each_migration_once_in_order(url):
    engine = open_engine(url)
    assert migrate(engine) == ALL_NAMES
    assert schema_version(engine) == len(ALL_NAMES)
    assert ALL_NAMES[:2] == ["m001_usage_events", "m002_audit_events"]
    assert pending_migrations(engine) == []
    tables = set(sa.inspect(engine).get_table_names())
    assert {"usage_events", "audit_events", "_neuralis_migrations"} <= tables
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT name, applied_at FROM _neuralis_migrations").all()
    assert sorted(name for name, _ in rows) == sorted(ALL_NAMES)
    assert all(datetime.fromisoformat(at).tzinfo is not None for _, at in rows)

    # Running it again changes nothing.
    assert migrate(engine) == []
    assert schema_version(engine) == len(ALL_NAMES)
    indexes = {ix["name"] for ix in sa.inspect(engine).get_indexes("usage_events")}
    assert indexes == {
        "ix_usage_events_project_ts",
        "ix_usage_events_user_ts",
        "ix_usage_events_agent_ts",
        "ix_usage_events_conversation",
    }


def test_a_failing_migration_leaves_nothing_behind_and_is_retried(url):
    engine = open_engine(url)
    migrate(engine)
    calls = []

    def m999_add_scratch(conn):
        calls.append(1)
        conn.exec_driver_sql("CREATE TABLE scratch (x INTEGER)")
        if len(calls) == 1:
            raise RuntimeError("disk on fire")

    # One more migration after the real ones, as a later issue would register it.
    chain = [*MIGRATIONS, m999_add_scratch]
    with pytest.raises(RuntimeError, match="disk on fire"):
        migrate(engine, chain)
    assert not sa.inspect(engine).has_table("scratch")
    assert pending_migrations(engine, chain) == ["m999_add_scratch"]
    assert schema_version(engine) == len(ALL_NAMES)

    assert migrate(engine, chain) == ["m999_add_scratch"]
    assert sa.inspect(engine).has_table("scratch")
    assert schema_version(engine) == len(ALL_NAMES) + 1


def test_registering_a_name_twice_is_refused():
    def m001_usage_events(conn):
        raise AssertionError("never runs")

    with pytest.raises(ValueError, match="already registered"):
        migrations.migration(m001_usage_events)


def test_micros_round_trip_exactly_and_refuse_naive_datetimes():
    when = datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC)
    assert from_micros(to_micros(when)) == when
    assert to_micros(datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC)) == 1
    with pytest.raises(ValueError, match="timezone-aware"):
        to_micros(datetime(2026, 11, 29, 10, 0))  # noqa: DTZ001 (the point of the test)
    with pytest.raises(TypeError, match="must be a datetime"):
        to_micros("2026-11-29T10:00:00+00:00")  # type: ignore[arg-type]


def run_together(code: str, count: int, *args: str) -> list[str]:
    """Run ``count`` Python processes at once and return their last output lines.

    Each child prints ``ready`` once imported and set up, then waits for a line on stdin; the test sends
    ``go`` only when every child is ready, so their real work overlaps.
    """
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), str(i), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", proc.communicate()[1]
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=90)
            assert proc.returncode == 0, err
            outputs.append(out.strip())
        return outputs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_processes_migrating_the_same_file_at_once_apply_each_migration_once(url):
    code = """
        import sys
        from neuralis_jupyter.store.migrations import migrate
        from neuralis_jupyter.store.sql import open_engine
        engine = open_engine(sys.argv[2])
        print("ready", flush=True)
        sys.stdin.readline()
        print(",".join(migrate(engine)))
    """
    outputs = run_together(code, 6, url)
    # Whoever won each race applied it; every migration was applied by exactly one process.
    applied = [name for out in outputs for name in out.split(",") if name]
    assert sorted(applied) == sorted(ALL_NAMES)
    engine = open_engine(url)
    with engine.connect() as conn:
        names = conn.exec_driver_sql("SELECT name FROM _neuralis_migrations").scalars().all()
    assert sorted(names) == sorted(ALL_NAMES)


def test_two_processes_writing_usage_rows_concurrently_all_land(url):
    migrate(open_engine(url))
    code = """
        import sys
        from datetime import UTC, datetime
        from neuralis_jupyter.store.sql import open_engine
        from neuralis_jupyter.store.usage import UsageEvent, UsageStore
        worker, url = sys.argv[1], sys.argv[2]
        store = UsageStore(open_engine(url))
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(150):  # one transaction per row: as many lock hand-overs as possible
            store.record(UsageEvent(
                ts=datetime.now(UTC), project_id="p", user_id=f"u{worker}", request_id=f"{worker}-{i}",
                provider="scripted", model="m", input_tokens=i, cost_usd=0.001,
            ))
    """
    run_together(code, 2, url)
    with open_engine(url).connect() as conn:
        got = conn.exec_driver_sql("SELECT request_id FROM usage_events").scalars().all()
    assert sorted(got) == sorted(f"{w}-{i}" for w in range(2) for i in range(150))
