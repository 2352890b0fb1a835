"""Stop requests that cross processes: a server route asks, the turn running in a kernel notices.

A turn polls :meth:`StopRequests.requested` between steps, while its model streams and while its tools
run; a request counts only if it is newer than the turn's start, so an old request never stops a new
turn.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..contracts.identity import assert_no_sentinel_ids
from .migrations import stop_requests, to_micros

__all__ = ["StopRequests"]


class StopRequests:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def request(
        self, *, project_id: str, conversation_id: str, requested_by: str, reason: str | None = None
    ) -> None:
        ids = {"project_id": project_id, "conversation_id": conversation_id, "requested_by": requested_by}
        assert_no_sentinel_ids(**ids)
        with self.engine.begin() as conn:
            conn.execute(
                stop_requests.insert().values(
                    ts=to_micros(datetime.now(UTC)),
                    project_id=project_id,
                    conversation_id=conversation_id,
                    requested_by=requested_by,
                    reason=reason,
                )
            )

    def requested(self, *, project_id: str, conversation_id: str, since: datetime) -> bool:
        c = stop_requests.c
        stmt = (
            sa.select(c.id)
            .where(
                c.project_id == project_id,
                c.conversation_id == conversation_id,
                c.ts >= to_micros(since, name="since"),
            )
            .limit(1)
        )
        with self.engine.connect() as conn:
            return conn.scalar(stmt) is not None
