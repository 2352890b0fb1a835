"""Per-stream session tickets (seed 002): ``nrs1.<requestId>.<secret>``.

A skill script runs as a child process, yet its calls back into the host must carry the real user.
At each skill activation the runtime mints a ticket from the stream's live session; the script sends
it back; the host verifies it and rebuilds the ORIGINAL :class:`SessionContext`.

Storage design
--------------
``stream_scopes`` holds one row per live stream (a turn), keyed by its request id, with the session its
tickets stand for. ``session_tickets`` holds, per minted ticket, only the sha256 of its 32-byte secret.
There is no signing key: the scope is in the store, so another process (the server, when the turn runs
in a kernel) can verify, and ending the stream revokes at once. A ticket lives exactly as long as its
stream: :meth:`TicketStore.end_stream` marks the scope ended and deletes its tickets. Within a live
stream a ticket may be used any number of times, in parallel.

Verification parses strictly, looks the scope up by request id and compares the secret's hash against
EVERY stored hash of the stream with :func:`hmac.compare_digest`, without stopping at a match. Callers
only ever learn "invalid or expired ticket"; the precise cause is logged at debug level.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
import secrets
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from ..contracts.identity import (
    IDENTITY_FIELDS,
    SKILL_USER_ID,
    SessionContext,
    SystemSession,
    assert_not_sentinel,
    session_from_dict,
    session_to_dict,
)
from .errors import StoreError
from .migrations import session_tickets, stream_scopes, to_micros

__all__ = ["TICKET_PREFIX", "SkillIdentityError", "TicketError", "TicketMintRefused", "TicketStore"]

log = logging.getLogger(__name__)

TICKET_PREFIX = "nrs1"
_SECRET_BYTES = 32
_REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_SECRET = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 bytes, urlsafe base64 without padding
_NO_MATCH = hashlib.sha256(b"no stream").hexdigest()


class TicketError(StoreError, PermissionError):
    """A ticket that does not stand for a live stream; the message never says which part was wrong."""

    code = "ticket_invalid"

    def __init__(self) -> None:
        super().__init__("invalid or expired ticket; the skill must use the ticket of its running turn")


class TicketMintRefused(StoreError, ValueError):
    """The session cannot have a ticket (no live stream, a system envelope, an unencodable id)."""

    code = "ticket_mint_refused"


class SkillIdentityError(TicketMintRefused):
    """The session carries the synthetic skill principal ``__skill__``: a skill cannot mint from it."""

    def __init__(self, field_name: str) -> None:
        self.field_name = field_name
        super().__init__(
            f"{field_name}={SKILL_USER_ID!r} is the audit label of a skill call whose user is not "
            "resolved, not an identity; a ticket is minted only from a real user's stream session"
        )


def _now() -> int:
    return to_micros(datetime.now(UTC))


def _digest(secret: bytes) -> str:
    return hashlib.sha256(secret).hexdigest()


def _parse(ticket: object) -> tuple[str, bytes] | None:
    if not isinstance(ticket, str):
        return None
    parts = ticket.split(".")
    if len(parts) != 3 or parts[0] != TICKET_PREFIX:
        return None
    request_id, encoded = parts[1], parts[2]
    if not _REQUEST_ID.fullmatch(request_id) or not _SECRET.fullmatch(encoded):
        return None
    try:
        secret = base64.urlsafe_b64decode(encoded + "=")
    except (binascii.Error, ValueError):
        return None
    # Canonical encoding only: unused trailing bits must be zero, so one secret has one spelling.
    if len(secret) != _SECRET_BYTES or base64.urlsafe_b64encode(secret).rstrip(b"=").decode() != encoded:
        return None
    return request_id, secret


class TicketStore:
    """Stream scopes and their tickets over one migrated engine (blocking: call through a thread)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def open_stream(self, session: SessionContext) -> None:
        """Open the live scope of ``session``'s stream; called when its turn starts (idempotent)."""
        request_id = self._check_mintable(session)
        text = json.dumps(session_to_dict(session), sort_keys=True, separators=(",", ":"))
        row = {
            "request_id": request_id,
            "project_id": session.project_id,
            "user_id": session.user_id,
            "session_json": text,
            "created": _now(),
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(stream_scopes.insert(), row)
        except IntegrityError:
            scope = self._scope(request_id)
            if scope is None or scope.ended is not None or scope.session_json != text:
                raise TicketMintRefused(
                    f"stream {request_id!r} was already opened for another session or has ended; "
                    "every turn needs its own request id"
                ) from None

    def mint(self, session: SessionContext) -> str:
        """A new ticket for ``session``'s live stream: ``nrs1.<requestId>.<secret>``."""
        request_id = self._check_mintable(session)
        scope = self._scope(request_id)
        if scope is None or scope.ended is not None:
            raise TicketMintRefused(f"stream {request_id!r} is not live; a ticket is minted only mid-turn")
        owner = session_from_dict(json.loads(scope.session_json))
        if (owner.user_id, owner.project_id) != (session.user_id, session.project_id):
            raise TicketMintRefused(f"stream {request_id!r} belongs to another user or project")
        secret = secrets.token_bytes(_SECRET_BYTES)
        with self.engine.begin() as conn:
            conn.execute(
                session_tickets.insert().values(
                    request_id=request_id, secret_sha256=_digest(secret), created=_now()
                )
            )
        encoded = base64.urlsafe_b64encode(secret).rstrip(b"=").decode()
        return f"{TICKET_PREFIX}.{request_id}.{encoded}"

    def verify(self, ticket: str) -> SessionContext:
        """The session of the live stream ``ticket`` was minted for; :class:`TicketError` otherwise."""
        parsed = _parse(ticket)
        if parsed is None:
            log.debug("ticket refused: malformed")
            raise TicketError()
        request_id, secret = parsed
        scope = self._scope(request_id)
        live = scope is not None and scope.ended is None
        with self.engine.connect() as conn:
            stored = conn.scalars(
                sa.select(session_tickets.c.secret_sha256).where(session_tickets.c.request_id == request_id)
            ).all()
        presented = _digest(secret).encode()
        matched = False
        for digest in stored or [_NO_MATCH]:  # every hash, no early exit
            matched |= hmac.compare_digest(presented, digest.encode())
        if not live or not matched:
            log.debug(
                "ticket refused for stream %s: %s",
                request_id,
                "no such stream" if scope is None else "stream ended" if not live else "secret mismatch",
            )
            raise TicketError()
        assert scope is not None
        return session_from_dict(json.loads(scope.session_json))

    def end_stream(self, request_id: str) -> None:
        """End the stream: every ticket minted for it dies now (idempotent)."""
        with self.engine.begin() as conn:
            conn.execute(
                stream_scopes.update()
                .where(stream_scopes.c.request_id == request_id, stream_scopes.c.ended.is_(None))
                .values(ended=_now())
            )
            conn.execute(session_tickets.delete().where(session_tickets.c.request_id == request_id))

    def end_streams_before(self, started_before: datetime) -> int:
        """End every stream still live that started before ``started_before`` (a crashed kernel's)."""
        cutoff = to_micros(started_before, name="started_before")
        t = stream_scopes.c
        with self.engine.begin() as conn:
            ids = conn.scalars(sa.select(t.request_id).where(t.ended.is_(None), t.created < cutoff)).all()
        for request_id in ids:
            self.end_stream(request_id)
        return len(ids)

    def _scope(self, request_id: str) -> sa.Row | None:
        stmt = sa.select(stream_scopes).where(stream_scopes.c.request_id == request_id)
        with self.engine.connect() as conn:
            return conn.execute(stmt).first()

    @staticmethod
    def _check_mintable(session: SessionContext) -> str:
        assert_not_sentinel(session)
        for name in IDENTITY_FIELDS:
            if getattr(session, name) == SKILL_USER_ID:
                raise SkillIdentityError(name)
        if isinstance(session, SystemSession):
            raise TicketMintRefused("a system envelope has no user to stand for; tickets carry user sessions")
        request_id = session.request_id
        if request_id is None or not _REQUEST_ID.fullmatch(request_id):
            raise TicketMintRefused(
                f"request_id {request_id!r} cannot name a stream: it must be 1-128 of [A-Za-z0-9_-]"
            )
        return request_id
