"""The SQL store on a real PostgreSQL server: migrations under the advisory lock, usage and audit rows,
``frames.usage()`` dtypes, and the per-user advisory lock of the rate-limit call log.

Each test module run starts a throwaway server of its own (``initdb`` + ``pg_ctl``) in a temp folder,
listening on a Unix socket only (no TCP port at all). PostgreSQL refuses to run as root, so as root the
server runs as the ``postgres`` user (Debian's package creates it), else ``nobody``. Without the
binaries or psycopg the tests skip, unless ``NEURALIS_POSTGRES_REQUIRED=1`` (set by ``.ci/run``, which
installs Debian's postgresql), where that fails them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from neuralis_jupyter import frames
from neuralis_jupyter.store import AuditEvent, Store
from neuralis_jupyter.store.migrations import MIGRATIONS, migrate, pending_migrations, schema_version
from neuralis_jupyter.store.sql import dispose_engines, open_engine

from .test_sql import run_together
from .usage_rows import T0, usage_event

ALL_NAMES = [m.__name__ for m in MIGRATIONS]
PORT = "5432"  # names the socket file in our own socket folder; no TCP port is opened


def _unavailable(reason: str) -> None:
    if os.environ.get("NEURALIS_POSTGRES_REQUIRED") == "1":
        pytest.fail(f"{reason}; NEURALIS_POSTGRES_REQUIRED=1 makes that a failure", pytrace=False)
    pytest.skip(reason)


def _bindir() -> Path | None:
    """The folder of initdb and pg_ctl: PATH first, else Debian's newest /usr/lib/postgresql/<v>/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3].split(".")[0])
    )
    return Path(candidates[-1]).parent if candidates else None


def _server_user() -> str | None:
    """Whom to run the server as: ourselves unless root, which PostgreSQL refuses."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    _unavailable("running as root and there is no postgres or nobody user to run the server as")
    return None


class Server:
    def __init__(self, bindir: Path, base: Path, user: str | None) -> None:
        self.bindir = bindir
        self.data = base / "data"
        self.socket = base / "socket"
        self.log = base / "server.log"
        self.user = user

    def run(self, *args: str) -> None:
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            user=self.user,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed:\n{result.stdout}{result.stderr}\n{log}")

    def start(self) -> None:
        # trust on a private socket folder only this user can reach; fsync off: the data is thrown away
        self.run("initdb", "-D", str(self.data), "-U", "neuralis", "--auth=trust", "-E", "UTF8")
        options = f"-c listen_addresses='' -k {self.socket} -p {PORT} -c fsync=off"
        self.run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o", options, "start"
        )

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://neuralis@/{database}?host={self.socket}&port={PORT}"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    bindir = _bindir()
    if bindir is None or not (bindir / "pg_ctl").is_file():
        _unavailable("PostgreSQL is not installed (apt-get install postgresql; .ci/run installs it)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install '.[test]' brings psycopg[binary])")
    user = _server_user()
    base = Path(tempfile.mkdtemp(prefix="neuralis-pg-"))
    server = Server(bindir, base, user)
    server.socket.mkdir()
    if user is not None:
        for path in (base, server.socket):
            shutil.chown(path, user=user)
    try:
        server.start()
        yield server
    finally:
        dispose_engines()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def url(server: Server) -> Iterator[str]:
    """A fresh, empty database on the module's server."""
    name = "t_" + uuid.uuid4().hex[:12]
    admin = sa.create_engine(server.url("postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield server.url(name)
    finally:
        dispose_engines()
        admin.dispose()


def test_migrations_apply_once_on_postgres(url):
    engine = open_engine(url)
    assert engine.dialect.name == "postgresql"
    assert schema_version(engine) == 0
    assert migrate(engine) == ALL_NAMES
    assert migrate(engine) == []
    assert pending_migrations(engine) == []
    assert schema_version(engine) == len(ALL_NAMES)
    assert {"usage_events", "audit_events", "model_calls", "_neuralis_migrations"} <= set(
        sa.inspect(engine).get_table_names()
    )


def test_processes_migrating_one_database_at_once_apply_each_migration_once(url):
    code = """
        import sys
        from neuralis_jupyter.store.migrations import migrate
        from neuralis_jupyter.store.sql import open_engine
        engine = open_engine(sys.argv[2])
        engine.connect().close()  # connected before the start signal, so the races overlap
        print("ready", flush=True)
        sys.stdin.readline()
        print(",".join(migrate(engine)))
    """
    outputs = run_together(code, 6, url)
    applied = [name for out in outputs for name in out.split(",") if name]
    assert sorted(applied) == sorted(ALL_NAMES)  # each by exactly one process, none failed
    with open_engine(url).connect() as conn:
        names = conn.exec_driver_sql("SELECT name FROM _neuralis_migrations").scalars().all()
    assert sorted(names) == sorted(ALL_NAMES)


def test_usage_and_audit_round_trip_on_postgres(url, tmp_path):
    store = Store.open(tmp_path / "root", store_url=url)
    events = [
        usage_event(),
        usage_event(
            ts=T0 + timedelta(microseconds=999_999, hours=1),
            user_id="bob",
            agent_id=None,
            conversation_id=None,
            request_id="r2",
            equivalent_cost_usd=0.9,
            cost_usd=2.5,
        ),
    ]
    assert store.usage.record_many(events) == 2
    assert store.usage.list() == events
    assert store.usage.spend("p", since=T0) == pytest.approx(2.5125)
    assert store.usage.spend("p", since=T0, user_id="bob") == pytest.approx(2.5)
    row_id = store.usage.insert(usage_event(request_id="r3"))
    store.usage.update(row_id, usage_event(request_id="r3", steps=5, cost_usd=1.0))
    assert [e.steps for e in store.usage.list(user_id="alice")] == [2, 5]

    frame = frames.usage("p", user="alice", store=store)
    assert list(frame["request_id"]) == ["r1", "r3"]
    assert str(frame["ts"].dtype) == "datetime64[us, UTC]"
    assert frame["input_tokens"].dtype.kind == "i"
    assert frame["cost_usd"].dtype.kind == "f"

    audited = AuditEvent(
        ts=T0, project_id="p", user_id="alice", action="tool.denied", outcome="denied", details={"n": [1, 2]}
    )
    store.audit.record(audited)
    assert store.audit.list("p") == [audited]


def test_rate_limited_reservations_from_many_processes_never_exceed_the_limit(url, tmp_path):
    # CallLogStore.reserve serialises one user's reservations with a PostgreSQL advisory lock: without
    # it, concurrent transactions each count the rows they can see and all of them fit.
    Store.open(tmp_path / "root", store_url=url).engine  # migrated  # noqa: B018
    code = """
        import sys
        from datetime import UTC, datetime, timedelta
        from neuralis_jupyter.store.calls import CallLogStore
        from neuralis_jupyter.store.sql import open_engine
        calls = CallLogStore(open_engine(sys.argv[2]))
        calls.count_since("p", "alice", datetime.now(UTC))  # connected before the start signal
        print("ready", flush=True)
        sys.stdin.readline()
        granted = 0
        for _ in range(10):
            if calls.reserve("p", "alice", datetime.now(UTC), limit=7, window=timedelta(minutes=1)) is None:
                granted += 1
        print(granted)
    """
    outputs = run_together(code, 6, url)
    assert sum(int(out) for out in outputs) == 7
    with open_engine(url).connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM model_calls").scalar() == 7
