"""Audit events: who did what, which policy arm decided, and why.

Storage design
--------------
Rows live in the ``audit_events`` table (see :mod:`.migrations`) and are append-only: an audit trail
that can be edited is not one. ``action`` is a dotted verb (``tool.allowed``, ``tool.denied``,
``agent.create``), ``subject`` what it acted on (a tool name, an agent id), ``arm`` the policy arm that
decided, ``outcome`` the result and ``reason`` the human sentence. ``details`` holds any further
structured context as compact JSON text, so the table needs no migration when a caller adds a key.
Reads are by project and time, newest first, through the ``(project_id, ts)`` index.

A row whose id columns hold a ``__system__`` sentinel is refused (seed 002: sentinels are
process-internal and never persisted). System work is still audited: a system session opened on a real
project (``create_system_session(reason, caller, scope)``) carries that project's real ids; an
unscoped one has nothing to attribute the row to.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..contracts.identity import assert_no_sentinel_ids
from .migrations import audit_events, from_micros, to_micros

__all__ = ["AuditEvent", "AuditStore"]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    """One audited decision or action. ``details`` must be JSON-serialisable."""

    ts: datetime = field(default_factory=_now)
    project_id: str
    user_id: str
    agent_id: str | None = None
    conversation_id: str | None = None
    request_id: str | None = None
    action: str
    subject: str | None = None
    arm: str | None = None
    outcome: str
    reason: str | None = None
    details: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        to_micros(self.ts)


_SCALARS = (
    "project_id",
    "user_id",
    "agent_id",
    "conversation_id",
    "request_id",
    "action",
    "subject",
    "arm",
    "outcome",
    "reason",
)
#: The identity columns a sentinel must never reach.
_ID_COLUMNS = ("project_id", "user_id", "agent_id", "conversation_id", "request_id")


class AuditStore:
    """Append and read audit events over one migrated engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, event: AuditEvent) -> None:
        assert_no_sentinel_ids(**{name: getattr(event, name) for name in _ID_COLUMNS})
        row: dict[str, Any] = {name: getattr(event, name) for name in _SCALARS}
        row["ts"] = to_micros(event.ts)
        row["details"] = (
            None
            if event.details is None
            else json.dumps(dict(event.details), separators=(",", ":"), sort_keys=True)
        )
        with self.engine.begin() as conn:
            conn.execute(audit_events.insert(), row)

    def list(
        self,
        project_id: str | None = None,
        *,
        user_id: str | None = None,
        action: str | None = None,
        since: datetime | None = None,
        limit: int = 1000,
    ) -> builtins.list[AuditEvent]:
        """Events matching every given filter, newest first, at most ``limit`` of them."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit!r}")
        t = audit_events.c
        stmt = sa.select(audit_events)
        if project_id is not None:
            stmt = stmt.where(t.project_id == project_id)
        if user_id is not None:
            stmt = stmt.where(t.user_id == user_id)
        if action is not None:
            stmt = stmt.where(t.action == action)
        if since is not None:
            stmt = stmt.where(t.ts >= to_micros(since, name="since"))
        stmt = stmt.order_by(t.ts.desc(), t.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [
            AuditEvent(
                ts=from_micros(row.ts),
                details=None if row.details is None else json.loads(row.details),
                **{name: getattr(row, name) for name in _SCALARS},
            )
            for row in rows
        ]
