"""Background sub-agent runs and their inboxes (seed 003, "Messaging another agent's conversation").

A background run (``delegate`` with ``background: true``) outlives the turn that started it and reports
to its parent conversation when it ends. :class:`BackgroundDelegates` owns those runs in one process
(``env.services["delegates"]``); the server's ``POST …/delegates/<runId>/inbox`` calls :meth:`send`.

Delivery is ``settle``: a background run's inbox has no mid-turn step, so a message sent while the run
works waits for the end of its current turn. The run then continues its own conversation with one more
turn, whose input is an ``inbox_message`` event naming the sender (the caller's own session; nothing
in a request body can claim another sender), run under the sender's identity bound to the run, with the
run's own tools (:func:`.subagents.resume_child`). When that turn ends the run reports to its parent
again. A message to a run that has ended starts that turn at once (once fewer than ``limit`` runs are
working). Consecutive messages from one sender are delivered together, in one turn. ``immediate`` is
refused (``inbox_delivery_unsupported``), and so is any other delivery (``inbox_delivery_invalid``).

Who may send: a user session of the run's project that may open, that is read and continue, the
parent conversation (its owner, or a role of the admin tier: :func:`can_open_conversation`). Another
project finds no run at all (``NotFound``), and so does anyone once the run is forgotten (the process
keeps the latest ``keep_finished`` ended runs); a run cannot message itself. Bounds: at most
``inbox_limit`` undelivered messages per run (``inbox_full``), at most ``max_chars`` characters each.

Nothing is lost: every message is written to ``<child conversation>/inbox.jsonl`` before ``send``
answers, one JSON line per event (``{"op": "queued", "message": InboxMessage}``, then
``{"op": "delivered", "id", "at"}`` once its ``inbox_message`` row is in the transcript), so
:func:`read_undelivered` lists what never reached the run, after a restart too.

Errors, each with the ``code`` the server maps to HTTP in one place::

    NeuralisRuntimeError
    └── InboxError
        ├── InboxDeliveryInvalid      an unknown delivery (400)
        ├── InboxDeliveryUnsupported  ``immediate`` to a background run (400)
        ├── InboxMessageInvalid       an empty or over-long message (400)
        ├── InboxToSelf               a run messaging its own inbox (400)
        ├── InboxForbidden            the caller may not write the parent conversation (403)
        └── InboxFull                 ``inbox_limit`` messages already wait (429)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

from ..contracts.agent_access import can_open_conversation
from ..contracts.identity import SessionContext, SystemSession
from ..store.conversations import Conversation, utcnow_iso
from ..store.errors import NotFound
from .errors import NeuralisRuntimeError

__all__ = [
    "INBOX_FILE",
    "BackgroundDelegates",
    "BackgroundLimitReached",
    "Delivery",
    "DetachedRun",
    "InboxDeliveryInvalid",
    "InboxDeliveryUnsupported",
    "InboxError",
    "InboxForbidden",
    "InboxFull",
    "InboxMessage",
    "InboxMessageInvalid",
    "InboxSender",
    "InboxToSelf",
    "Queued",
    "read_undelivered",
]

log = logging.getLogger(__name__)

INBOX_FILE = "inbox.jsonl"
Delivery = Literal["settle", "immediate"]


# -- errors ---------------------------------------------------------------------------------------


class InboxError(NeuralisRuntimeError):
    code = "inbox_error"

    def __init__(self, run_id: str, message: str) -> None:
        self.run_id = run_id
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.run_id, str(self)))


class InboxDeliveryInvalid(InboxError, ValueError):
    code = "inbox_delivery_invalid"


class InboxDeliveryUnsupported(InboxError, ValueError):
    code = "inbox_delivery_unsupported"


class InboxMessageInvalid(InboxError, ValueError):
    code = "inbox_message_invalid"


class InboxToSelf(InboxError, ValueError):
    code = "inbox_to_self"


class InboxForbidden(InboxError, PermissionError):
    code = "inbox_forbidden"


class InboxFull(InboxError):
    code = "inbox_full"


class BackgroundLimitReached(NeuralisRuntimeError, RuntimeError):
    code = "background_limit_reached"


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


def _append_line(path: Path, entry: dict[str, Any]) -> None:
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
class DetachedRun:
    """One background run as its starter (``delegate``) hands it over. The callables never raise for
    a failed turn: they answer the report text that says so."""

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
    #: Report to the parent: the text, the sender whose messages the turn answered (``None`` for the
    #: first turn) and those message ids.
    report: Callable[[str, SessionContext | None, tuple[str, ...]], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class _Queued:
    message: InboxMessage
    session: SessionContext


@dataclass(kw_only=True)
class _Run:
    spec: DetachedRun
    #: Accepted and not yet taken for delivery, oldest first (the file keeps them until delivered).
    pending: list[_Queued] = field(default_factory=list)
    #: A task runs (or waits to run) this run's turns; a message to an idle run wakes it.
    busy: bool = True

    def take(self) -> list[_Queued]:
        """The next batch: the oldest messages from one sender. Empty makes the run idle; nothing
        awaits between the check and the flag, so a message sent meanwhile is never stranded."""
        if not self.pending:
            self.busy = False
            return []
        key = _sender_key(self.pending[0].session)
        n = 1
        while n < len(self.pending) and _sender_key(self.pending[n].session) == key:
            n += 1
        batch, self.pending = self.pending[:n], self.pending[n:]
        return batch


def _sender_key(session: SessionContext) -> tuple[str, str, str | None]:
    return (session.project_id, session.user_id, session.agent_id)


class BackgroundDelegates:
    """The background sub-agent runs of one process, each with its own inbox. Owned tasks (``tasks``
    holds the working ones, which a host drains), cancelled on :meth:`aclose`."""

    def __init__(
        self, *, limit: int, inbox_limit: int = 20, max_chars: int = 20_000, keep_finished: int = 200
    ) -> None:
        self.limit = limit
        self.inbox_limit = inbox_limit
        self.max_chars = max_chars
        self.keep_finished = keep_finished
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._runs: dict[str, _Run] = {}
        self._waiting: deque[str] = deque()
        self._closing = False

    def start(self, run: DetachedRun) -> None:
        """Start ``run``'s first turn now; :class:`BackgroundLimitReached` when ``limit`` runs work."""
        if self._closing:
            raise BackgroundLimitReached("this process is shutting down; start the sub-agent again later")
        if len(self.tasks) >= self.limit:
            raise BackgroundLimitReached(
                f"{self.limit} background sub-agents are already running; wait for one to report "
                "or raise c.DelegateSettings.max_background"
            )
        self._prune()
        state = _Run(spec=run)
        self._runs[run.run_id] = state
        self._launch(state, first=True)

    # -- the runtime functions (the server exposes them as routes) --------------------------------

    async def send(self, run_id: str, text: str, session: SessionContext, delivery: str = "settle") -> Queued:
        """Queue ``text`` for run ``run_id`` from ``session``; see the module docstring for the rules."""
        run = self._visible(run_id, session)
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
        if len(text) > self.max_chars:
            raise InboxMessageInvalid(
                run_id,
                f"the message has {len(text)} characters, more than the {self.max_chars} allowed; "
                "put the long part in a file and send its path",
            )
        if len(run.pending) >= self.inbox_limit:
            raise InboxFull(
                run_id,
                f"{self.inbox_limit} messages already wait for run {run_id!r}; send again once it has "
                "taken them (c.DelegateSettings.inbox_limit sets the bound)",
            )
        message: InboxMessage = {
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
        queued = _Queued(message=message, session=session)
        run.pending.append(queued)  # counted at once, so concurrent sends cannot pass the bound
        try:
            await asyncio.to_thread(
                _append_line, run.spec.conversation.path / INBOX_FILE, {"op": "queued", "message": message}
            )
        except BaseException:
            if queued in run.pending:
                run.pending.remove(queued)
            raise
        log.info("inbox message %s queued for run %s by %s", message["id"], run_id, session.user_id)
        if not run.busy and not self._closing:
            self._wake(run)
        return {"queued": True, "id": message["id"]}

    async def undelivered(self, run_id: str, session: SessionContext) -> list[InboxMessage]:
        """The run's messages not yet delivered, each with its delivery; the same gate as ``send``."""
        run = self._visible(run_id, session)
        return await asyncio.to_thread(read_undelivered, run.spec.conversation.path)

    def is_working(self, run_id: str) -> bool:
        """Whether a turn of ``run_id`` runs or waits to run (False for an unknown run)."""
        run = self._runs.get(run_id)
        return run is not None and run.busy

    async def aclose(self) -> None:
        """Cancel every working run; undelivered messages stay in their inbox files."""
        self._closing = True
        self._waiting.clear()
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- one run's life ---------------------------------------------------------------------------

    def _visible(self, run_id: str, session: SessionContext) -> _Run:
        run = self._runs.get(run_id)
        if run is None or run.spec.project_id != session.project_id:
            raise NotFound("delegate run", run_id)
        if session.delegate_run_id == run_id or session.conversation_id == run_id:
            raise InboxToSelf(run_id, f"run {run_id!r} cannot message its own inbox")
        if isinstance(session, SystemSession):
            raise InboxForbidden(
                run_id,
                "a message to a sub-agent run is answered by a turn under the sender's identity; "
                "a system session has none: send it as the user the work is for",
            )
        if not can_open_conversation(session, owner=run.spec.parent_owner):
            raise InboxForbidden(
                run_id,
                f"only who may write the conversation that started run {run_id!r} may message it "
                "(its owner, or an admin of the project)",
            )
        return run

    def _wake(self, run: _Run) -> None:
        run.busy = True
        if len(self.tasks) < self.limit:
            self._launch(run, first=False)
        else:
            self._waiting.append(run.spec.run_id)

    def _launch(self, run: _Run, *, first: bool) -> None:
        run_id = run.spec.run_id
        task = asyncio.ensure_future(self._life(run, first=first))
        self.tasks[run_id] = task
        task.add_done_callback(lambda t: self._done(run_id, t))

    def _done(self, run_id: str, task: asyncio.Task[None]) -> None:
        if self.tasks.get(run_id) is task:
            del self.tasks[run_id]
        if not task.cancelled() and task.exception() is not None:
            log.error("background sub-agent %s could not report back", run_id, exc_info=task.exception())
        while self._waiting and len(self.tasks) < self.limit and not self._closing:
            waiting = self._runs.get(self._waiting.popleft())
            if waiting is not None:
                self._launch(waiting, first=False)

    async def _life(self, run: _Run, *, first: bool) -> None:
        try:
            if first:
                await self._report(run, await run.spec.first(), None, ())
            while batch := run.take():
                sender = batch[0].session
                ids = tuple(q.message["id"] for q in batch)
                try:
                    await self._deliver(run, batch)
                except Exception:
                    # Still queued in the file; the run cannot take them, so it goes on with the rest.
                    log.exception("could not deliver %s to run %s", ", ".join(ids), run.spec.run_id)
                    continue
                await self._report(run, await run.spec.resume(sender), sender, ids)
        except Exception:
            run.busy = False  # a later message wakes the run again
            raise

    async def _deliver(self, run: _Run, batch: list[_Queued]) -> None:
        """The ``inbox_message`` row first, then the delivered marks: a crash between them repeats a
        message in the transcript rather than losing it."""
        sender = batch[0].session
        row = {
            "role": "event",
            "content": [_block(q.message) for q in batch],
            "user_id": sender.user_id,
            "agent_id": sender.agent_id,
        }
        await asyncio.to_thread(run.spec.conversation.append, row)
        path = run.spec.conversation.path / INBOX_FILE
        for q in batch:
            entry = {"op": "delivered", "id": q.message["id"], "at": utcnow_iso()}
            await asyncio.to_thread(_append_line, path, entry)

    async def _report(
        self, run: _Run, text: str, sender: SessionContext | None, ids: tuple[str, ...]
    ) -> None:
        try:
            await run.spec.report(text, sender, ids)
        except asyncio.CancelledError:
            raise
        except Exception:  # the run still takes its messages: a failed report must not strand them
            log.exception("background sub-agent %s could not report back", run.spec.run_id)

    def _prune(self) -> None:
        idle = [k for k, r in self._runs.items() if not r.busy and not r.pending]
        for key in idle[: max(0, len(idle) - self.keep_finished)]:
            del self._runs[key]


def _block(message: InboxMessage) -> dict[str, Any]:
    sender = message["from"]
    who = f"user {sender['userId']}"
    if sender["agentId"]:
        who += f" (agent {sender['agentId']}"
        who += f", conversation {sender['conversationId']})" if sender["conversationId"] else ")"
    return {
        "type": "inbox_message",
        "id": message["id"],
        "from": sender,
        "delivery": message["delivery"],
        "message": message["text"],
        # What the model reads (the transcript renders an inbox_message event by its text).
        "text": f"Message from {who}:\n{message['text']}",
    }
