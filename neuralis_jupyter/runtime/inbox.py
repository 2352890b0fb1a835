"""Background sub-agent runs and their inboxes (seed 003, "Messaging another agent's conversation").

A background run (``delegate`` with ``background: true``) outlives the turn that started it and reports
to its parent conversation when it ends. :class:`BackgroundDelegates` owns those runs in one process
(``env.services["delegates"]``); the server's ``POST …/delegates/<runId>/inbox`` and the kernel's
``%inbox`` call its ``send``.

Delivery is ``settle``: a message sent while the run works waits for the end of its current turn (a
background run has no mid-turn step: ``immediate`` is ``inbox_delivery_unsupported``, anything else
``inbox_delivery_invalid``). The run then takes one more turn of its own conversation, whose input is
an ``inbox_message`` event naming the sender (the caller's own session, never a body field), under the
sender's identity bound to the run, with the run's own tools (:func:`.subagents.resume_child`), and
reports again. A message to an ended run starts that turn at once (once fewer than ``limit`` runs work).
Consecutive messages from one sender are delivered together, in one turn.

Turns are numbered (the first is 1) and each report carries its number, so a waiter can tell the report
of the turn now owed from an earlier one (:meth:`BackgroundDelegates.working`). A report is its row in
the parent conversation, written by the run's task, then the parent's follow-up turn, which waits for
the parent conversation to be free: that runs as a task of its own (``follow_ups``), holds no slot of
``limit`` and never delays the run's next message. ``pending`` lists both kinds; ``aclose`` cancels both.

Who may send: a user session of the run's project that may open the parent conversation (its owner, or
the admin tier: :func:`can_open_conversation`). Another project, or anyone once the run is forgotten
(the latest ``keep_finished`` ended runs are kept), finds no run (``NotFound``); a run cannot message
itself. Brakes: ``inbox_limit`` undelivered messages per run, ``max_chars`` characters each,
``rate_limit`` messages per sender per minute. The seed's ``inbox_hops_exceeded`` bounds chains of
agents messaging agents; only user sessions send here, so there is no chain to bound.

Nothing is lost: a message is written to ``<child conversation>/inbox.jsonl`` before ``send`` answers
(``{"op": "queued", "message": InboxMessage}``, then ``{"op": "delivered", "id", "at"}`` once its row is
in the transcript), so :func:`read_undelivered` lists what never reached the run, after a restart too.
A failed delivery is tried ``deliver_attempts`` times, backing off; then the messages stay undelivered
in the file and the run goes on with the next ones. After a restart, :meth:`~BackgroundDelegates.recover`
finds a parent's runs on disk so that their undelivered messages are listed again; such a run cannot
take another turn (its tools, prompt and model were its starting turn's and are not kept), so a message
to it is refused: delegate the task again, pointing at the old transcript.

One event loop runs every task of the registry: the first that uses it (a kernel's main loop, which
outlives its subshells'). ``start``, ``send`` and a wake from another thread (a subshell's turn, its
``%inbox``) decide at once, under the registry's lock, and hand the task over to that loop; ``pending``
answers futures of the caller's loop. A run whose loop closed under it (its thread ended) holds no slot.

The errors, each with the ``code`` the server maps to HTTP, are in :mod:`.inbox_errors`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contracts.agent_access import can_open_conversation
from ..contracts.identity import SessionContext, SystemSession
from ..store.conversations import Conversation, utcnow_iso
from ..store.errors import NotFound
from .inbox_errors import (
    BackgroundLimitReached,
    InboxDeliveryInvalid,
    InboxDeliveryUnsupported,
    InboxError,
    InboxForbidden,
    InboxFull,
    InboxHopsExceeded,
    InboxMessageInvalid,
    InboxRateLimited,
    InboxRunNotResumable,
    InboxToSelf,
)
from .inbox_wire import (
    INBOX_FILE,
    Delivery,
    DetachedRun,
    InboxMessage,
    InboxSender,
    Queued,
    RunReport,
    SenderRates,
    append_line,
    check_message,
    new_message,
    read_undelivered,
)
from .subagents import child_conversation

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
    "InboxHopsExceeded",
    "InboxMessage",
    "InboxMessageInvalid",
    "InboxRateLimited",
    "InboxRunNotResumable",
    "InboxSender",
    "InboxToSelf",
    "Queued",
    "RunReport",
    "read_undelivered",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class _Queued:
    message: InboxMessage
    session: SessionContext


@dataclass(kw_only=True)
class _Run:
    run_id: str
    conversation: Conversation
    project_id: str
    parent_owner: str
    #: ``None`` for a run found on disk after a restart (:meth:`BackgroundDelegates.recover`).
    spec: DetachedRun | None
    #: Accepted and not yet taken for delivery, oldest first (the file keeps them until delivered).
    pending: list[_Queued] = field(default_factory=list)
    #: A task runs (or waits to run) this run's turns; a message to an idle run wakes it.
    busy: bool = False
    #: The number of the latest turn started, and of the latest turn whose report is written.
    turn: int = 0
    reported: int = 0

    def take(self) -> list[_Queued]:
        """The next batch: the oldest messages from one sender. Empty makes the run idle. The caller
        holds the registry's lock, under which every send appends: a message is never stranded."""
        if not self.pending:
            self.busy = False
            return []
        key = _sender_key(self.pending[0].session)
        n = 1
        while n < len(self.pending) and _sender_key(self.pending[n].session) == key:
            n += 1
        batch, self.pending = self.pending[:n], self.pending[n:]
        return batch


def _write_queued(run: _Run, queued: _Queued) -> None:
    append_line(run.conversation.path / INBOX_FILE, {"op": "queued", "message": queued.message})


def _sender_key(session: SessionContext) -> tuple[str, str, str | None]:
    return (session.project_id, session.user_id, session.agent_id)


class BackgroundDelegates:
    """The background sub-agent runs of one process, each with its own inbox. Owned tasks (``tasks``
    holds the working runs, ``follow_ups`` the parent turns their reports start), cancelled on
    :meth:`aclose`."""

    def __init__(
        self,
        *,
        limit: int,
        inbox_limit: int = 20,
        max_chars: int = 20_000,
        keep_finished: int = 200,
        rate_limit: int = 30,
        deliver_attempts: int = 3,
        retry_delay: float = 0.5,
    ) -> None:
        self.limit = limit
        self.inbox_limit = inbox_limit
        self.max_chars = max_chars
        self.keep_finished = keep_finished
        self.rate_limit = rate_limit
        self.deliver_attempts = deliver_attempts
        self.retry_delay = retry_delay
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.follow_ups: set[asyncio.Task[None]] = set()
        #: The loop every task runs on (see the module docstring); ``None`` until the first start.
        self.loop: asyncio.AbstractEventLoop | None = None
        # Sends and starts come from any thread: what they share with the loop's thread is under it.
        self._lock = threading.Lock()
        #: The runs holding one of ``limit`` slots: their task runs, or is handed to the loop.
        self._slots: set[str] = set()
        self._runs: dict[str, _Run] = {}
        self._waiting: deque[str] = deque()
        self._rates = SenderRates()
        self._recovered: set[Path] = set()
        self._closing = False

    def bind(self, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.AbstractEventLoop:
        """The loop every task runs on: ``loop`` (else the running one) unless one is bound already."""
        self._reap()
        with self._lock:
            if self.loop is None:
                self.loop = loop or asyncio.get_running_loop()
            return self.loop

    def start(self, run: DetachedRun) -> None:
        """Start ``run``'s first turn now; :class:`BackgroundLimitReached` when ``limit`` runs work.
        From any thread: the first turn runs on the registry's loop."""
        self.bind()
        with self._lock:
            if self._closing:
                raise BackgroundLimitReached("this process is shutting down; start the sub-agent again later")
            if len(self._slots) >= self.limit:
                raise BackgroundLimitReached(
                    f"{self.limit} background sub-agents are already running; wait for one to report "
                    "or raise c.DelegateSettings.max_background"
                )
            self._prune()
            state = _Run(
                run_id=run.run_id,
                conversation=run.conversation,
                project_id=run.project_id,
                parent_owner=run.parent_owner,
                spec=run,
                busy=True,
            )
            self._runs[run.run_id] = state
            self._slots.add(run.run_id)
        self._spawn(state, first=True)

    # -- the runtime functions (the server exposes them as routes) --------------------------------

    async def send(self, run_id: str, text: str, session: SessionContext, delivery: str = "settle") -> Queued:
        """Queue ``text`` for run ``run_id`` from ``session``; see the module docstring for the rules."""
        run, queued = self._accept(run_id, text, session, delivery)
        try:
            await asyncio.to_thread(_write_queued, run, queued)
        except BaseException:
            self._withdraw(run, queued)
            raise
        return self._queued(run, queued)

    def send_now(self, run_id: str, text: str, session: SessionContext, delivery: str = "settle") -> Queued:
        """``send`` for a caller that cannot await (a kernel's line magic, on any thread): the same
        rules, with the one line written in this thread; it never waits for the registry's loop, which
        takes the message when it is free."""
        run, queued = self._accept(run_id, text, session, delivery)
        try:
            _write_queued(run, queued)
        except BaseException:
            self._withdraw(run, queued)
            raise
        return self._queued(run, queued)

    async def undelivered(self, run_id: str, session: SessionContext) -> list[InboxMessage]:
        """The run's messages not yet delivered, each with its delivery; the same gate as ``send``."""
        run = self._visible(run_id, session)
        return await asyncio.to_thread(read_undelivered, run.conversation.path)

    def recover(self, parent: Conversation) -> list[str]:
        """Know the runs of ``parent`` found on disk that this process did not start (it restarted
        since), so that their undelivered messages are listed; their ids. Blocking: reads a few files,
        once per parent."""
        base = parent.path / "delegates"
        if parent.path in self._recovered or not base.is_dir():
            return []
        meta = parent.read_meta()
        on_disk = [d.name for d in sorted(base.iterdir()) if (d / "meta.json").is_file()]
        with self._lock:
            found = [run_id for run_id in on_disk if run_id not in self._runs]
            for run_id in found:
                self._runs[run_id] = _Run(
                    run_id=run_id,
                    conversation=child_conversation(parent, run_id),
                    project_id=meta["project_id"],
                    parent_owner=meta["user_id"],
                    spec=None,
                )
            self._recovered.add(parent.path)
        return found

    def is_working(self, run_id: str) -> bool:
        """Whether a turn of ``run_id`` runs or waits to run (False for an unknown run)."""
        self._reap()
        with self._lock:
            run = self._runs.get(run_id)
            return run is not None and run.busy

    def working(self) -> dict[str, int]:
        """The runs with a turn running or waiting to run, each with the number of the turn whose
        report is owed: an earlier report of the run is not the one a waiter waits for."""
        self._reap()
        with self._lock:
            return {k: r.reported + 1 for k, r in self._runs.items() if r.busy}

    def pending(self) -> list[asyncio.Future[None]]:
        """The tasks a host that drains must wait for: working runs and follow-up turns, each until its
        end is handled (a run that breaks hands its waiting messages to a new task then). Called on
        another loop than the registry's, a future of that loop stands for each."""
        self._reap()
        with self._lock:
            loop, tasks = self.loop, [*self.tasks.values(), *self.follow_ups]
        caller = _running_loop()
        if not tasks or loop is None or caller is None or caller is loop:
            return list(tasks)
        return [asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_ended(t), loop)) for t in tasks]

    async def aclose(self) -> None:
        """Cancel every working run and follow-up turn; undelivered messages stay in their files.
        From any loop: the cancelling happens on the registry's."""
        with self._lock:
            self._closing = True
            self._waiting.clear()
            loop = self.loop
        if loop is None or loop is _running_loop():
            await self._cancel_all()
        elif loop.is_running():
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._cancel_all(), loop))
        else:  # stopped or closed: nothing there runs again, and nothing can be awaited
            self._forget_tasks()

    async def _cancel_all(self) -> None:
        with self._lock:
            tasks = [*self.tasks.values(), *self.follow_ups]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _reap(self) -> None:
        """Forget the tasks of a loop that closed under them (a subshell's, whose thread ended): they
        never run again, so they hold no slot and no run is working; the next start binds anew."""
        loop = self.loop
        if loop is not None and loop.is_closed():
            log.warning("the event loop of the background sub-agents closed; their runs ended with it")
            self._forget_tasks()
            with self._lock:
                self.loop = None

    def _forget_tasks(self) -> None:
        with self._lock:
            self.tasks.clear()
            self.follow_ups.clear()
            self._slots.clear()
            self._waiting.clear()
            for run in self._runs.values():
                run.busy = False  # a message sent later wakes it (its waiting ones with it)

    # -- sending ----------------------------------------------------------------------------------

    def _accept(self, run_id: str, text: str, session: SessionContext, delivery: str) -> tuple[_Run, _Queued]:
        with self._lock:  # the bounds below hold across threads: checked and counted in one step
            return self._accept_locked(run_id, text, session, delivery)

    def _accept_locked(
        self, run_id: str, text: str, session: SessionContext, delivery: str
    ) -> tuple[_Run, _Queued]:
        run = self._visible(run_id, session)
        check_message(run_id, text, delivery, max_chars=self.max_chars)
        if run.spec is None:
            raise InboxRunNotResumable(
                run_id,
                f"run {run_id!r} is not held by this process (it restarted since the run started, or "
                "forgot the run among older ended ones): its tools, prompt and model are gone, so it cannot "
                "take another turn. Delegate the task again and point the new run at the old transcript: "
                f"{run.conversation.path / 'messages.jsonl'}",
            )
        if len(run.pending) >= self.inbox_limit:
            raise InboxFull(
                run_id,
                f"{self.inbox_limit} messages already wait for run {run_id!r}; send again once it has "
                "taken them (c.DelegateSettings.inbox_limit sets the bound)",
            )
        # Counted at once, before any await, so concurrent sends cannot pass either bound.
        self._rates.take(_sender_key(session), run_id, limit=self.rate_limit)
        queued = _Queued(message=new_message(run_id, text, session), session=session)
        run.pending.append(queued)
        return run, queued

    def _withdraw(self, run: _Run, queued: _Queued) -> None:
        with self._lock:
            if queued in run.pending:
                run.pending.remove(queued)
            self._rates.give_back(_sender_key(queued.session))

    def _queued(self, run: _Run, queued: _Queued) -> Queued:
        key = queued.message["id"]
        log.info("inbox message %s queued for run %s by %s", key, run.run_id, queued.session.user_id)
        self._reap()
        with self._lock:
            launch = not run.busy and not self._closing and self._wake(run)
        if launch:
            self._spawn(run, first=False)
        return {"queued": True, "id": key}

    # -- one run's life ---------------------------------------------------------------------------

    def _visible(self, run_id: str, session: SessionContext) -> _Run:
        run = self._runs.get(run_id)
        if run is None or run.project_id != session.project_id:
            raise NotFound("delegate run", run_id)
        if session.delegate_run_id == run_id or session.conversation_id == run_id:
            raise InboxToSelf(run_id, f"run {run_id!r} cannot message its own inbox")
        if isinstance(session, SystemSession):
            raise InboxForbidden(
                run_id,
                "a message to a sub-agent run is answered by a turn under the sender's identity; "
                "a system session has none: send it as the user the work is for",
            )
        if not can_open_conversation(session, owner=run.parent_owner):
            raise InboxForbidden(
                run_id,
                f"only who may write the conversation that started run {run_id!r} may message it "
                "(its owner, or an admin of the project)",
            )
        return run

    def _wake(self, run: _Run) -> bool:
        """Under the lock: mark ``run`` busy and take it a slot; whether the caller spawns its task."""
        run.busy = True
        if len(self._slots) < self.limit:
            self._slots.add(run.run_id)
            return True
        self._waiting.append(run.run_id)
        return False

    def _spawn(self, run: _Run, *, first: bool) -> None:
        """Start the task of ``run`` (its slot taken) on the registry's loop, from any thread."""
        loop = self.loop
        if loop is not None and loop is _running_loop():
            self._launch(run, first=first)
            return
        try:
            if loop is None:
                raise RuntimeError("no event loop is bound")
            loop.call_soon_threadsafe(self._launch, run, first)
        except RuntimeError:  # the loop closed meanwhile: the next call finds it closed and rebinds
            log.warning("background sub-agent %s could not start: its event loop is gone", run.run_id)
            with self._lock:
                self._slots.discard(run.run_id)
                run.busy = False

    def _launch(self, run: _Run, first: bool) -> None:
        """On the registry's loop: the task of ``run``, whose slot is taken."""
        run_id = run.run_id
        with self._lock:
            if self._closing:  # handed over before aclose, arrived after it
                self._slots.discard(run_id)
                run.busy = False
                return
        task = asyncio.get_running_loop().create_task(
            self._life(run, first=first), name=f"background sub-agent {run_id}"
        )
        with self._lock:
            self.tasks[run_id] = task
        task.add_done_callback(lambda t: self._done(run, t))

    def _done(self, run: _Run, task: asyncio.Task[None]) -> None:
        launch: list[_Run] = []
        with self._lock:
            if self.tasks.get(run.run_id) is task:
                del self.tasks[run.run_id]
                self._slots.discard(run.run_id)
            failed = not task.cancelled() and task.exception() is not None
            if failed or task.cancelled():
                run.busy = False  # nothing runs its turns now
            if failed:
                log.error("background sub-agent %s failed", run.run_id, exc_info=task.exception())
                if run.pending and not self._closing and self._wake(run):
                    # Accepted messages are never stranded: the run takes them (every batch it takes
                    # is used up, so this cannot loop without progress).
                    launch.append(run)
            while self._waiting and len(self._slots) < self.limit and not self._closing:
                waiting = self._runs.get(self._waiting.popleft())
                if waiting is not None:
                    self._slots.add(waiting.run_id)
                    launch.append(waiting)
        for each in launch:
            self._launch(each, first=False)

    async def _life(self, run: _Run, *, first: bool) -> None:
        spec = run.spec
        assert spec is not None  # a recovered run is never woken: its sends are refused
        try:
            if first:
                run.turn = 1
                await self._report(run, RunReport(run_id=run.run_id, turn=1, text=await spec.first()))
            failures = 0
            while True:
                with self._lock:
                    batch = run.take()
                if not batch:
                    break
                ids = tuple(q.message["id"] for q in batch)
                try:
                    await self._deliver(run, batch)
                except Exception:
                    failures += 1
                    again = failures < self.deliver_attempts
                    log.log(
                        logging.WARNING if again else logging.ERROR,
                        "could not deliver %s to run %s (attempt %d of %d); %s",
                        ", ".join(ids), run.run_id, failures, self.deliver_attempts,
                        "trying again" if again else f"they stay undelivered in {run.conversation.path}",
                        exc_info=True,
                    )  # fmt: skip
                    if again:
                        with self._lock:
                            run.pending[:0] = batch  # first in line again, after a growing pause
                        await asyncio.sleep(self.retry_delay * 2 ** (failures - 1))
                    else:
                        failures = 0
                    continue
                failures = 0
                run.turn += 1
                sender = batch[0].session
                text = await spec.resume(sender)
                await self._report(
                    run, RunReport(run_id=run.run_id, turn=run.turn, text=text, sender=sender, inbox_ids=ids)
                )
        except Exception:
            with self._lock:
                run.busy = False  # a later message wakes the run again, and _done takes what waits
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
        await asyncio.to_thread(run.conversation.append, row)
        path = run.conversation.path / INBOX_FILE
        try:
            for q in batch:
                entry = {"op": "delivered", "id": q.message["id"], "at": utcnow_iso()}
                await asyncio.to_thread(append_line, path, entry)
        except Exception:  # the row is in the transcript: the run answers it; the file over-reports
            log.exception("inbox messages of run %s were delivered but could not be marked", run.run_id)

    async def _report(self, run: _Run, report: RunReport) -> None:
        spec = run.spec
        assert spec is not None
        try:
            await spec.report(report)
        except asyncio.CancelledError:
            raise
        except Exception:  # the run still takes its messages: a failed report must not strand them
            log.exception("background sub-agent %s could not report back", run.run_id)
            return
        finally:
            run.reported = report.turn
        if spec.follow_up is not None and not self._closing:
            task = asyncio.get_running_loop().create_task(
                spec.follow_up(report), name=f"follow-up of {run.run_id} turn {report.turn}"
            )
            with self._lock:
                self.follow_ups.add(task)
            task.add_done_callback(self._followed)

    def _followed(self, task: asyncio.Task[None]) -> None:
        with self._lock:
            self.follow_ups.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("the parent's turn after a sub-agent report failed", exc_info=task.exception())

    def _prune(self) -> None:
        idle = [k for k, r in self._runs.items() if not r.busy and not r.pending]
        for key in idle[: max(0, len(idle) - self.keep_finished)]:
            del self._runs[key]


async def _ended(task: asyncio.Task[None]) -> None:
    await asyncio.wait({task})


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


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
