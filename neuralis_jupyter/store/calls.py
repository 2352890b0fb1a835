"""The model-call log behind ``llm_rate_limit_rpm``: one row per model call of a rate-limited user.

Rows older than a few minutes are useless; each write prunes the caller's expired rows so the table stays
the size of one minute of traffic.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from .migrations import from_micros, model_calls, to_micros

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
