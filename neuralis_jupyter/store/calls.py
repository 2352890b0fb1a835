"""The model-call log behind ``llm_rate_limit_rpm``: one row per model call of a rate-limited user.

:meth:`CallLogStore.reserve` inserts the call first and counts within the same transaction, which on
SQLite takes the write lock at ``BEGIN IMMEDIATE`` (on PostgreSQL, a per-user advisory lock):
concurrent reservations, in any process, are serialised, and one that finds the window full deletes its
own row before it commits.

Rows older than a few minutes are useless; each write prunes the caller's expired rows so the table stays
the size of one minute of traffic.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..contracts.identity import assert_no_sentinel_ids
from .migrations import from_micros, model_calls, to_micros
from .sql import SQLITE_BEGIN_OPTION

__all__ = ["CallLogStore"]

_KEEP = timedelta(minutes=5)


class CallLogStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _where(self, project_id: str, user_id: str, since: datetime) -> list[sa.ColumnElement[bool]]:
        c = model_calls.c
        return [c.project_id == project_id, c.user_id == user_id, c.ts >= to_micros(since, name="since")]

    def count_since(self, project_id: str, user_id: str, since: datetime) -> int:
        stmt = (
            sa.select(sa.func.count())
            .select_from(model_calls)
            .where(*self._where(project_id, user_id, since))
        )
        with self.engine.connect() as conn:
            return int(conn.scalar(stmt) or 0)

    def oldest_since(self, project_id: str, user_id: str, since: datetime) -> datetime | None:
        stmt = sa.select(sa.func.min(model_calls.c.ts)).where(*self._where(project_id, user_id, since))
        with self.engine.connect() as conn:
            micros = conn.scalar(stmt)
        return None if micros is None else from_micros(int(micros))

    def record(self, project_id: str, user_id: str, when: datetime) -> None:
        assert_no_sentinel_ids(project_id=project_id, user_id=user_id)
        c = model_calls.c
        with self.engine.begin() as conn:
            conn.execute(
                model_calls.insert().values(ts=to_micros(when), project_id=project_id, user_id=user_id)
            )
            conn.execute(
                model_calls.delete().where(
                    c.project_id == project_id, c.user_id == user_id, c.ts < to_micros(when - _KEEP)
                )
            )

    def reserve(
        self, project_id: str, user_id: str, when: datetime, *, limit: int, window: timedelta
    ) -> datetime | None:
        assert_no_sentinel_ids(project_id=project_id, user_id=user_id)
        c = model_calls.c
        mine = (c.project_id == project_id, c.user_id == user_id)
        in_window = (*mine, c.ts >= to_micros(when - window, name="when"))
        options = {SQLITE_BEGIN_OPTION: "IMMEDIATE"}
        with self.engine.connect().execution_options(**options) as conn, conn.begin():
            if conn.dialect.name == "postgresql":  # SQLite's BEGIN IMMEDIATE already serialises writers
                key = f"model_calls/{project_id}/{user_id}"
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": key})
            insert = model_calls.insert().values(ts=to_micros(when), project_id=project_id, user_id=user_id)
            row_id = conn.execute(insert).inserted_primary_key[0]
            count = conn.scalar(sa.select(sa.func.count()).select_from(model_calls).where(*in_window)) or 0
            if count <= limit:
                conn.execute(model_calls.delete().where(*mine, c.ts < to_micros(when - _KEEP)))
                return None
            conn.execute(model_calls.delete().where(c.id == row_id))
            oldest = conn.scalar(sa.select(sa.func.min(c.ts)).where(*in_window))
        return from_micros(int(oldest)) if oldest is not None else when
