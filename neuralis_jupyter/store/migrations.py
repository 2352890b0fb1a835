"""The SQL schema and its forward-only, named migrations.

Storage design
--------------
Tables are SQLAlchemy Core ``Table`` objects on the module-level :data:`metadata`; stores query them
through these objects, never through SQL strings. Times are ``BigInteger`` microseconds since the Unix
epoch (UTC): one integer compares and indexes the same way on SQLite and PostgreSQL, and converts to a
pandas ``datetime64[us, UTC]`` column without parsing.

The schema changes only through migrations, as in simonw/llm: each is a function registered with
``@migration``, named by the function (``m001_usage_events``), applied once, in registration order, each
in its own transaction, and recorded in ``_neuralis_migrations(name, applied_at)``. Nothing is ever
rewritten or reordered once released: a change is a new function at the end of the list.

Table definitions describe the CURRENT schema and a creating migration builds its table from them, so
a fresh database gets the latest shape at once. The rule that follows: a later migration that adds a
column to a released table must skip the column when it already exists (a fresh database has it).

Two processes may migrate the same store at once (a kernel and the server starting together). Each
migration runs under the write lock (``BEGIN IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL) and
re-reads the applied names under it, so the second process finds the work done and skips it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .sql import SQLITE_BEGIN_OPTION

__all__ = [
    "MIGRATIONS",
    "audit_events",
    "from_micros",
    "guard_overrides",
    "metadata",
    "migrate",
    "migration",
    "model_calls",
    "pending_interactions",
    "pending_migrations",
    "schema_version",
    "session_tickets",
    "stop_requests",
    "stream_scopes",
    "to_micros",
    "usage_events",
]

log = logging.getLogger(__name__)

#: Arbitrary constant naming the PostgreSQL advisory lock migrations serialise on.
_PG_LOCK_KEY = 0x4E52_4C53

Migration = Callable[[Connection], None]
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration; its ``__name__`` is its permanent identity."""
    if any(m.__name__ == fn.__name__ for m in MIGRATIONS):
        raise ValueError(f"migration {fn.__name__!r} is already registered")
    MIGRATIONS.append(fn)
    return fn


# -- column conventions -----------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(when: datetime, *, name: str = "ts") -> int:
    """``when`` as integer microseconds since the epoch; a naive datetime is refused, not guessed."""
    if not isinstance(when, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(
            f"{name} must be timezone-aware, got naive {when.isoformat()!r}; "
            "use datetime.now(UTC) or attach tzinfo=UTC"
        )
    # Integer arithmetic on the timedelta: exact, unlike timestamp() which goes through a float.
    return (when - _EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


# -- tables -----------------------------------------------------------------------------------------

metadata = sa.MetaData()

# One row per pricing partition of a model call (a turn spanning two models writes two rows sharing
# one request_id). Written before the next call's spend check reads it.
usage_events = sa.Table(
    "usage_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("project_id", sa.String(128), nullable=False),
    sa.Column("user_id", sa.String(128), nullable=False),
    sa.Column("agent_id", sa.String(128), nullable=True),
    sa.Column("conversation_id", sa.String(128), nullable=True),
    sa.Column("request_id", sa.String(128), nullable=False),
    sa.Column("provider", sa.String(64), nullable=False),
    sa.Column("model", sa.String(128), nullable=False),
    sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_read_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("steps", sa.Integer, nullable=False, server_default="0"),
    sa.Column("cost_usd", sa.Float, nullable=False, server_default="0"),
    sa.Column("equivalent_cost_usd", sa.Float, nullable=True),
    sa.Column("duration_ms", sa.Integer, nullable=False, server_default="0"),
    # cost_usd rides in the project index so the project-total spend check before every model call
    # reads the index alone, never the table.
    sa.Index("ix_usage_events_project_ts", "project_id", "ts", "cost_usd"),
    sa.Index("ix_usage_events_user_ts", "user_id", "ts"),
    sa.Index("ix_usage_events_agent_ts", "agent_id", "ts"),
    sa.Index("ix_usage_events_conversation", "conversation_id"),
)

audit_events = sa.Table(
    "audit_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("project_id", sa.String(128), nullable=False),
    sa.Column("user_id", sa.String(128), nullable=False),
    sa.Column("agent_id", sa.String(128), nullable=True),
    sa.Column("conversation_id", sa.String(128), nullable=True),
    sa.Column("request_id", sa.String(128), nullable=True),
    sa.Column("action", sa.String(128), nullable=False),
    sa.Column("subject", sa.String(256), nullable=True),
    sa.Column("arm", sa.String(128), nullable=True),
    sa.Column("outcome", sa.String(64), nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("details", sa.Text, nullable=True),
    sa.Index("ix_audit_events_project_ts", "project_id", "ts"),
)

# Model calls per user, for the per-minute rate cap shared by every process on the store.
model_calls = sa.Table(
    "model_calls",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("project_id", sa.String(128), nullable=False),
    sa.Column("user_id", sa.String(128), nullable=False),
    sa.Index("ix_model_calls_user_ts", "project_id", "user_id", "ts"),
)

# A stop asked for a conversation's running turn from another process (a server route stopping a
# turn that runs in a kernel). The turn polls for a request newer than its own start.
stop_requests = sa.Table(
    "stop_requests",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("project_id", sa.String(128), nullable=False),
    sa.Column("conversation_id", sa.String(128), nullable=False),
    sa.Column("requested_by", sa.String(128), nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Index("ix_stop_requests_conversation_ts", "project_id", "conversation_id", "ts"),
)

# A tool call waiting for a person's approval (or a question waiting for an answer). It outlives the
# process that asked: the VALIDATED input is stored as canonical JSON with its sha256, and only that
# input ever runs. ``status`` moves pending -> approved|denied|expired, approved -> executed.
pending_interactions = sa.Table(
    "pending_interactions",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("created", sa.BigInteger, nullable=False),
    sa.Column("updated", sa.BigInteger, nullable=False),
    sa.Column("project_id", sa.String(128), nullable=False),
    sa.Column("user_id", sa.String(128), nullable=False),
    sa.Column("agent_id", sa.String(128), nullable=True),
    sa.Column("conversation_id", sa.String(128), nullable=True),
    sa.Column("request_id", sa.String(128), nullable=True),
    sa.Column("tool_use_id", sa.String(128), nullable=True),
    sa.Column("tool_name", sa.String(256), nullable=False),
    sa.Column("package_id", sa.String(256), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("input_json", sa.Text, nullable=False),
    sa.Column("input_hash", sa.String(64), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    # Who asked for the approval ("guard:balanced", "hook:<name>") and the guard profile at that time.
    sa.Column("asked_by", sa.String(256), nullable=False),
    sa.Column("guard_profile", sa.String(16), nullable=True),
    # The asking session (contracts.identity.session_to_dict), so a replay can rebuild its context.
    sa.Column("session_json", sa.Text, nullable=False),
    sa.Column("decided_by", sa.String(256), nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("answer_json", sa.Text, nullable=True),
    sa.Index("ix_pending_interactions_project_status", "project_id", "status", "conversation_id"),
)

# A guard profile set for one conversation's running turns from another process (a server route
# flipping a kernel's turn); read at every tool decision.
guard_overrides = sa.Table(
    "guard_overrides",
    metadata,
    sa.Column("project_id", sa.String(128), primary_key=True),
    sa.Column("conversation_id", sa.String(128), primary_key=True),
    sa.Column("profile", sa.String(16), nullable=False),
    sa.Column("set_by", sa.String(128), nullable=False),
    sa.Column("updated", sa.BigInteger, nullable=False),
)

# The live scope of one stream (a turn): the session its tickets rebuild. ``ended`` set = every ticket
# of the stream is dead.
stream_scopes = sa.Table(
    "stream_scopes",
    metadata,
    sa.Column("request_id", sa.String(128), primary_key=True),
    sa.Column("project_id", sa.String(128), nullable=False),
    sa.Column("user_id", sa.String(128), nullable=False),
    sa.Column("session_json", sa.Text, nullable=False),
    sa.Column("created", sa.BigInteger, nullable=False),
    sa.Column("ended", sa.BigInteger, nullable=True),
)

# One row per minted ticket: only the sha256 of its secret is kept.
session_tickets = sa.Table(
    "session_tickets",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(128), nullable=False),
    sa.Column("secret_sha256", sa.String(64), nullable=False),
    sa.Column("created", sa.BigInteger, nullable=False),
    sa.Index("ix_session_tickets_request", "request_id"),
)

# Bookkeeping lives outside ``metadata`` so the application schema is exactly the migrated tables.
_migrations_table = sa.Table(
    "_neuralis_migrations",
    sa.MetaData(),
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("applied_at", sa.String(40), nullable=False),
)


# -- migrations (append only) -----------------------------------------------------------------------


@migration
def m001_usage_events(conn: Connection) -> None:
    usage_events.create(conn)


@migration
def m002_audit_events(conn: Connection) -> None:
    audit_events.create(conn)


@migration
def m003_model_calls(conn: Connection) -> None:
    model_calls.create(conn)


@migration
def m004_stop_requests(conn: Connection) -> None:
    stop_requests.create(conn)


@migration
def m005_pending_interactions(conn: Connection) -> None:
    pending_interactions.create(conn)


@migration
def m006_guard_overrides(conn: Connection) -> None:
    guard_overrides.create(conn)


@migration
def m007_stream_scopes(conn: Connection) -> None:
    stream_scopes.create(conn)


@migration
def m008_session_tickets(conn: Connection) -> None:
    session_tickets.create(conn)


# -- running them -----------------------------------------------------------------------------------


def _applied(conn: Connection) -> set[str]:
    if not sa.inspect(conn).has_table(_migrations_table.name):
        return set()
    return set(conn.scalars(sa.select(_migrations_table.c.name)))


def _read_applied(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return _applied(conn)


def schema_version(engine: Engine) -> int:
    """How many migrations this store has applied (0 for a fresh database)."""
    return len(_read_applied(engine))


def pending_migrations(engine: Engine, migrations: Sequence[Migration] | None = None) -> list[str]:
    """Names of the registered migrations not yet applied, in the order :func:`migrate` runs them.

    ``migrations`` defaults to every registered one (a tool or a test may pass its own list)."""
    applied = _read_applied(engine)
    return [
        m.__name__ for m in (MIGRATIONS if migrations is None else migrations) if m.__name__ not in applied
    ]


def migrate(engine: Engine, migrations: Sequence[Migration] | None = None) -> list[str]:
    """Apply every pending migration; return the names applied by this call (empty when up to date)."""
    chain = MIGRATIONS if migrations is None else migrations
    if not pending_migrations(engine, chain):
        return []
    done: list[str] = []
    for fn in chain:
        with engine.connect().execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"}) as conn:
            with conn.begin():
                _lock_for_migration(conn)
                if fn.__name__ in _applied(conn):
                    continue
                fn(conn)
                conn.execute(
                    _migrations_table.insert().values(
                        name=fn.__name__, applied_at=datetime.now(UTC).isoformat()
                    )
                )
            done.append(fn.__name__)
            log.info("applied store migration %s", fn.__name__)
    return done


def _lock_for_migration(conn: Connection) -> None:
    # SQLite: BEGIN IMMEDIATE (set by the caller) already holds the write lock. PostgreSQL: a
    # transaction-scoped advisory lock, taken before the bookkeeping table may exist to be locked.
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    _migrations_table.create(conn, checkfirst=True)
