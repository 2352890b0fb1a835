"""The inbox's wire shapes, its file, and the value types a background run is handed over as.

``<child conversation>/inbox.jsonl`` holds ``{"op": "queued", "message": InboxMessage}`` lines and then
``{"op": "delivered", "id", "at"}`` once a message's row is in the transcript, so
:func:`read_undelivered` answers from the file alone, after a restart too (:mod:`.inbox`).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from ..contracts.identity import SessionContext
from ..store.conversations import Conversation, utcnow_iso
from .inbox_errors import (
    InboxDeliveryInvalid,
    InboxDeliveryUnsupported,
    InboxMessageInvalid,
    InboxRateLimited,
)

__all__ = [
    "INBOX_FILE",
    "Delivery",
    "DetachedRun",
    "InboxMessage",
    "InboxSender",
    "Queued",
    "RunReport",
    "SenderRates",
    "append_line",
    "check_message",
    "new_message",
    "read_undelivered",
]

INBOX_FILE = "inbox.jsonl"
Delivery = Literal["settle", "immediate"]


# -- wire shapes ----------------------------------------------------------------------------------


class InboxSender(TypedDict):
    userId: str
    agentId: str | None
    conversationId: str | None


#: One queued message. ``from`` is always the sending session, never anything the caller wrote.
InboxMessage = TypedDict(
    "InboxMessage",
    {"id": str, "runId": str, "text": str, "delivery": Delivery, "from": InboxSender, "queuedAt": str},
)


class Queued(TypedDict):
    queued: Literal[True]
    id: str


# -- the inbox file -------------------------------------------------------------------------------


def append_line(path: Path, entry: dict[str, Any]) -> None:
    # One write of one line in append mode: lines from concurrent writers never interleave.
    data = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_undelivered(directory: Path) -> list[InboxMessage]:
    """The messages queued for the run whose conversation is ``directory`` and not yet delivered,
    oldest first. Reads only the file, so it answers after a restart too."""
    queued: dict[str, InboxMessage] = {}
    delivered: set[str] = set()
    try:
        with open(directory / INBOX_FILE, encoding="utf-8") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        return []
    for line in lines:
        if not line.endswith("\n"):
            continue  # a write cut short by a crash: its send never answered
        entry = json.loads(line)
        if entry.get("op") == "queued":
            queued[entry["message"]["id"]] = entry["message"]
        elif entry.get("op") == "delivered":
            delivered.add(entry["id"])
    return [m for key, m in queued.items() if key not in delivered]


# -- the runs -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """What one turn of a run reports to its parent."""

    run_id: str
    #: 1 for the first turn, one more for each inbox turn.
    turn: int
    text: str
    #: The sender whose messages the turn answered; ``None`` for the first turn.
    sender: SessionContext | None = None
    inbox_ids: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DetachedRun:
    """One background run as its starter (``delegate``) hands it over. The turn callables never raise
    for a failed turn: they answer the report text that says so."""

    run_id: str
    #: The run's own conversation (its ``inbox.jsonl`` lives beside ``messages.jsonl``).
    conversation: Conversation
    #: Who may message the run: sessions of this project that may open a conversation of this owner.
    project_id: str
    parent_owner: str
    #: The run's first turn; answers the report text.
    first: Callable[[], Awaitable[str]]
    #: One more turn of the run's conversation as the given sender; answers the report text.
    resume: Callable[[SessionContext], Awaitable[str]]
    #: Write the report's row in the parent conversation (the run's task awaits it).
    report: Callable[[RunReport], Awaitable[None]]
    #: The parent's turn that answers a report, run as a task of its own once its row is written.
    follow_up: Callable[[RunReport], Coroutine[Any, Any, None]] | None = None


def check_message(run_id: str, text: object, delivery: str, *, max_chars: int) -> None:
    """Refuse a message no background run can take, saying how to send it instead."""
    if delivery == "immediate":
        raise InboxDeliveryUnsupported(
            run_id,
            "a background sub-agent run has no mid-turn step to take a message at: send it with "
            "delivery 'settle' (the default); it arrives when the run's current turn ends",
        )
    if delivery != "settle":
        raise InboxDeliveryInvalid(
            run_id, f"unknown delivery {delivery!r}: a background sub-agent run takes 'settle' only"
        )
    if not isinstance(text, str) or not text.strip():
        raise InboxMessageInvalid(run_id, "the message is empty; write what the sub-agent should know")
    if len(text) > max_chars:
        raise InboxMessageInvalid(
            run_id,
            f"the message has {len(text)} characters, more than the {max_chars} allowed; "
            "put the long part in a file and send its path",
        )


def new_message(run_id: str, text: str, session: SessionContext) -> InboxMessage:
    """The queued message; ``from`` is the sending session, whatever the caller wrote."""
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "runId": run_id,
        "text": text,
        "delivery": "settle",
        "from": {
            "userId": session.user_id,
            "agentId": session.agent_id,
            "conversationId": session.conversation_id,
        },
        "queuedAt": utcnow_iso(),
    }


class SenderRates:
    """The ``inbox_rate_limited`` brake: messages per sender in a rolling minute (the caller locks)."""

    WINDOW = 60.0

    def __init__(self) -> None:
        self._sent: dict[object, deque[float]] = {}

    def take(self, sender: object, run_id: str, *, limit: int) -> None:
        now = time.monotonic()
        sent = self._sent.setdefault(sender, deque())
        while sent and now - sent[0] >= self.WINDOW:
            sent.popleft()
        if len(sent) >= limit:
            raise InboxRateLimited(
                run_id,
                f"you sent {limit} messages to sub-agent inboxes in the last minute; send again in "
                f"{self.WINDOW - (now - sent[0]):.0f} s (c.DelegateSettings.inbox_rate_limit sets the bound)",
            )
        sent.append(now)

    def give_back(self, sender: object) -> None:
        """Undo the latest ``take`` of ``sender`` (its message was not kept)."""
        sent = self._sent.get(sender)
        if sent:
            sent.pop()
