"""Pending interactions and per-conversation guard overrides: what a person decides about a running turn.

Storage design
--------------
``pending_interactions`` (see :mod:`.migrations`) holds one row per question put to a person: a tool
call waiting for approval (``kind="tool_approval"``) or a question for the user (``kind="question"``).
The row keeps the asking session, the tool, and the VALIDATED input as canonical JSON
(:func:`canonical_json`: sorted keys, compact separators, no NaN) with its sha256 in ``input_hash``.
Nothing that resolves an interaction can change the input: :meth:`InteractionStore.resolve` takes a
decision and an answer, never arguments, and a replay re-hashes the stored JSON before it runs it.

``status`` only moves forward, each step a compare-and-set in one UPDATE so two processes cannot both
win: ``pending -> approved | denied | expired`` and ``approved -> executed`` (once). Because the row is
in SQL, an interaction asked in a kernel that then exits can be approved and replayed by another
process.

``guard_overrides`` holds the guard profile a server route set for one conversation; a running turn
reads it at each tool decision (:class:`neuralis_jupyter.policy.guard.StoreGuard`).
"""

from __future__ import annotations

import builtins
import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from ..contracts.identity import SessionContext, assert_no_sentinel_ids, assert_not_sentinel, session_to_dict
from .errors import NotFound, StoreError
from .migrations import from_micros, guard_overrides, pending_interactions, to_micros
from .projects import GuardProfile

__all__ = [
    "GuardOverrideStore",
    "InteractionConflict",
    "InteractionKind",
    "InteractionStatus",
    "InteractionStore",
    "PendingInteraction",
    "canonical_json",
    "input_hash",
]

InteractionKind = Literal["tool_approval", "question"]
InteractionStatus = Literal["pending", "approved", "denied", "executed", "expired"]
_PROFILES: frozenset[str] = frozenset({"safe", "balanced", "auto"})


def canonical_json(value: Mapping[str, Any]) -> str:
    """The one text form of a tool input that is stored and hashed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def input_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _now() -> int:
    return to_micros(datetime.now(UTC))


class InteractionConflict(StoreError):
    """The interaction is no longer in the state the caller expected (409)."""

    code = "interaction_conflict"

    def __init__(self, interaction_id: str, status: str, wanted: str) -> None:
        self.interaction_id = interaction_id
        self.status = status
        super().__init__(f"interaction {interaction_id!r} is {status}, not {wanted}; nothing was changed")


@dataclass(frozen=True, kw_only=True)
class PendingInteraction:
    id: str
    created: datetime
    updated: datetime
    project_id: str
    user_id: str
    agent_id: str | None
    conversation_id: str | None
    request_id: str | None
    tool_use_id: str | None
    tool_name: str
    package_id: str
    kind: InteractionKind
    input_json: str
    input_hash: str
    status: InteractionStatus
    asked_by: str
    guard_profile: GuardProfile | None
    session_json: str
    decided_by: str | None = None
    reason: str | None = None
    answer_json: str | None = None

    @property
    def input(self) -> dict[str, Any]:
        """The stored input, parsed (verify :attr:`input_hash` before you run it)."""
        return json.loads(self.input_json)


_COLUMNS = tuple(c.name for c in pending_interactions.columns)


def _record(row: Any) -> PendingInteraction:
    values = {name: getattr(row, name) for name in _COLUMNS}
    values["created"] = from_micros(row.created)
    values["updated"] = from_micros(row.updated)
    return PendingInteraction(**values)


def _get(conn: Connection, interaction_id: str) -> PendingInteraction:
    stmt = sa.select(pending_interactions).where(pending_interactions.c.id == interaction_id)
    row = conn.execute(stmt).first()
    if row is None:
        raise NotFound("interaction", interaction_id)
    return _record(row)


class InteractionStore:
    """Create, read and resolve pending interactions over one migrated engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(
        self,
        *,
        session: SessionContext,
        tool_name: str,
        package_id: str,
        input: Mapping[str, Any],
        asked_by: str,
        guard_profile: GuardProfile | None = None,
        kind: InteractionKind = "tool_approval",
    ) -> PendingInteraction:
        """Persist a pending interaction for ``session``; ``input`` must already be validated."""
        assert_not_sentinel(session)
        text = canonical_json(input)
        now = _now()
        row: dict[str, Any] = {
            "id": "pi-" + secrets.token_hex(12),
            "created": now,
            "updated": now,
            "project_id": session.project_id,
            "user_id": session.user_id,
            "agent_id": session.agent_id,
            "conversation_id": session.conversation_id,
            "request_id": session.request_id,
            "tool_use_id": session.tool_use_id,
            "tool_name": tool_name,
            "package_id": package_id,
            "kind": kind,
            "input_json": text,
            "input_hash": input_hash(text),
            "status": "pending",
            "asked_by": asked_by,
            "guard_profile": guard_profile,
            "session_json": canonical_json(session_to_dict(session)),
        }
        with self.engine.begin() as conn:
            conn.execute(pending_interactions.insert(), row)
        return self.get(row["id"])

    def get(self, interaction_id: str) -> PendingInteraction:
        with self.engine.connect() as conn:
            return _get(conn, interaction_id)

    def list_pending(
        self, project_id: str, conversation_id: str | None = None
    ) -> builtins.list[PendingInteraction]:
        """The project's pending interactions (of one conversation when given), oldest first."""
        t = pending_interactions.c
        stmt = sa.select(pending_interactions).where(t.project_id == project_id, t.status == "pending")
        if conversation_id is not None:
            stmt = stmt.where(t.conversation_id == conversation_id)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt.order_by(t.created, t.id)).all()
        return [_record(r) for r in rows]

    def withdraw(self, interaction_id: str, *, reason: str) -> PendingInteraction:
        """Expire a PENDING interaction whose turn stopped waiting; InteractionConflict otherwise."""
        return self._move(interaction_id, frm="pending", status="expired", reason=reason)

    def _move(self, interaction_id: str, *, frm: InteractionStatus, **values: Any) -> PendingInteraction:
        t = pending_interactions.c
        stmt = (
            pending_interactions.update()
            .where(t.id == interaction_id, t.status == frm)
            .values(updated=_now(), **values)
        )
        with self.engine.begin() as conn:  # the row as this transaction left it
            moved = conn.execute(stmt).rowcount
            current = _get(conn, interaction_id)
        if moved != 1:
            raise InteractionConflict(interaction_id, current.status, frm)
        return current

    def resolve(
        self,
        interaction_id: str,
        *,
        approve: bool,
        decided_by: str,
        reason: str | None = None,
        answer: Mapping[str, Any] | None = None,
    ) -> PendingInteraction:
        """Approve or deny a PENDING interaction; a second resolution raises :class:`InteractionConflict`."""
        return self._move(
            interaction_id,
            frm="pending",
            status="approved" if approve else "denied",
            decided_by=decided_by,
            reason=reason,
            answer_json=None if answer is None else canonical_json(answer),
        )

    def mark_executed(self, interaction_id: str) -> PendingInteraction:
        """Claim an APPROVED interaction for its one execution; a second claim raises."""
        return self._move(interaction_id, frm="approved", status="executed")

    def expire(self, *, older_than: datetime) -> int:
        """Expire every interaction still pending that was created before ``older_than``."""
        t = pending_interactions.c
        stmt = (
            pending_interactions.update()
            .where(t.status == "pending", t.created < to_micros(older_than, name="older_than"))
            .values(status="expired", updated=_now())
        )
        with self.engine.begin() as conn:
            return conn.execute(stmt).rowcount


def _key(project_id: str, conversation_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    t = guard_overrides.c
    return (t.project_id == project_id, t.conversation_id == conversation_id)


class GuardOverrideStore:
    """The guard profile set for one conversation from outside its turn (``None``: not set)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def get(self, project_id: str, conversation_id: str) -> GuardProfile | None:
        stmt = sa.select(guard_overrides.c.profile).where(*_key(project_id, conversation_id))
        with self.engine.connect() as conn:
            value = conn.scalar(stmt)
        return value if value in _PROFILES else None

    def set(self, project_id: str, conversation_id: str, profile: GuardProfile, *, set_by: str) -> None:
        if profile not in _PROFILES:
            raise ValueError(f"guard profile must be safe, balanced or auto, got {profile!r}")
        assert_no_sentinel_ids(project_id=project_id, conversation_id=conversation_id, set_by=set_by)
        values = {"profile": profile, "set_by": set_by, "updated": _now()}
        where = _key(project_id, conversation_id)
        with self.engine.begin() as conn:
            if conn.execute(guard_overrides.update().where(*where).values(**values)).rowcount:
                return
            try:
                with conn.begin_nested():
                    conn.execute(
                        guard_overrides.insert().values(
                            project_id=project_id, conversation_id=conversation_id, **values
                        )
                    )
            except IntegrityError:  # another process inserted it first: ours is the newer word
                conn.execute(guard_overrides.update().where(*where).values(**values))

    def clear(self, project_id: str, conversation_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(guard_overrides.delete().where(*_key(project_id, conversation_id)))
