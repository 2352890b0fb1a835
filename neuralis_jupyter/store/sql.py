"""One SQLAlchemy engine per store URL, tuned so a kernel and the server can share a SQLite file.

Storage design
--------------
Usage, audit and the other relational records live behind one SQLAlchemy URL. The default is a SQLite
file in the data root; a team points ``store_url`` at PostgreSQL instead and every URL that is not
SQLite passes through untouched.

Two OS processes write the SQLite file at once (the notebook's kernel records usage while the server
records audit rows), so every SQLite connection is set up the same way when it opens:

- ``journal_mode=WAL``: readers never block the writer and the writer never blocks readers.
- ``busy_timeout=30000``: a writer that finds the write lock taken waits up to 30 s for it instead of
  failing at once with "database is locked".
- ``synchronous=NORMAL``: in WAL mode a commit survives a process crash; only an OS crash or power loss
  can drop the last commits, never corrupt the file.
- ``foreign_keys=ON``: SQLite leaves constraints off unless each connection asks.

The ``sqlite3`` module's legacy transaction handling neither wraps DDL in a transaction nor lets us ask
for ``BEGIN IMMEDIATE``; we switch it off and emit ``BEGIN`` ourselves (the recipe in SQLAlchemy's SQLite
dialect docs). A connection may carry the execution option ``sqlite_begin="IMMEDIATE"`` to take the write
lock up front, which the migrator uses so two processes never apply the same migration.

Engines are cached per URL for the life of the process: an engine owns a connection pool, and building
one per call would reopen the file (and rerun the pragmas) on every spend check.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url

__all__ = ["BUSY_TIMEOUT_MS", "SQLITE_BEGIN_OPTION", "dispose_engines", "open_engine"]

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
#: Execution option naming the SQLite BEGIN flavour: "DEFERRED" (default), "IMMEDIATE" or "EXCLUSIVE".
SQLITE_BEGIN_OPTION = "sqlite_begin"
_BEGIN_MODES = frozenset({"DEFERRED", "IMMEDIATE", "EXCLUSIVE"})

_engines: dict[str, Engine] = {}
_lock = threading.Lock()
_fork_hook_installed = False


def open_engine(url: str) -> Engine:
    """The process-wide engine for ``url``, created (and for SQLite, tuned) on first use."""
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _create(url)
            _engines[url] = engine
            _install_fork_hook()
        return engine


def dispose_engines() -> None:
    """Close every cached engine's pool and forget it (tests; a process about to exit)."""
    with _lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.dispose()


def _create(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return sa.create_engine(url)
    database = parsed.database
    if database and database != ":memory:" and not parsed.query.get("uri"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url)
    event.listen(engine, "connect", _on_sqlite_connect)
    event.listen(engine, "begin", _on_sqlite_begin)
    log.debug("opened SQLite store %s", database)
    return engine


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Driver-level autocommit: no implicit BEGIN from sqlite3; _on_sqlite_begin emits ours. It also lets
    # journal_mode change, which SQLite refuses inside a transaction.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: switching a fresh file to WAL needs a lock another process may hold.
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            _switch_to_wal(cursor)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _switch_to_wal(cursor: Any) -> None:
    # WAL is a property of the file, set once by whichever process opens it first. SQLite answers
    # "database is locked" at once, without consulting busy_timeout, when two processes try that switch
    # together, so retry until the busy timeout would have expired.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def _on_sqlite_begin(conn: sa.Connection) -> None:
    mode = str(conn.get_execution_options().get(SQLITE_BEGIN_OPTION, "DEFERRED")).upper()
    if mode not in _BEGIN_MODES:
        raise ValueError(f"{SQLITE_BEGIN_OPTION} must be one of {sorted(_BEGIN_MODES)}, got {mode!r}")
    conn.exec_driver_sql(f"BEGIN {mode}")


def _install_fork_hook() -> None:
    # A forked child must not reuse the parent's pooled connections (two processes on one socket or
    # SQLite handle); SQLAlchemy's answer is dispose(close=False) in the child.
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_pools_in_child)
        _fork_hook_installed = True


def _forget_pools_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another parent thread may have held it at the instant of the fork
    for engine in _engines.values():
        engine.dispose(close=False)
