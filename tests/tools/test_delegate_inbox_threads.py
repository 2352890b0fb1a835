"""The background registry used from more than one thread: a kernel's subshell runs a turn on its own
thread and event loop, beside the main shell's. The registry's tasks all run on one loop (the first that
uses it), so a run started or messaged from a subshell outlives the subshell's loop, frees its slot when
it ends, and is closed or drained from the main loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from neuralis_jupyter.contracts.identity import SessionContext
from neuralis_jupyter.runtime.inbox import BackgroundDelegates, DetachedRun, RunReport
from neuralis_jupyter.store.conversations import Conversation

ALICE = SessionContext(user_id="alice", project_id="p")


class Run:
    """One scripted run: its first turn waits for ``release`` (when given); it records the loop each
    turn ran on, and its reports."""

    def __init__(self, path: Path, run_id: str = "d-run", release: asyncio.Event | None = None) -> None:
        self.run_id = run_id
        self.conversation = Conversation(path, conversation_id=run_id)
        self.release = release
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.reports: list[RunReport] = []
        self.cancelled = False

    def spec(self) -> DetachedRun:
        async def first() -> str:
            self.loops.append(asyncio.get_running_loop())
            try:
                if self.release is not None:
                    await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
            return "first"

        async def resume(sender: SessionContext) -> str:
            self.loops.append(asyncio.get_running_loop())
            return "answered"

        async def report(done: RunReport) -> None:
            self.reports.append(done)

        return DetachedRun(
            run_id=self.run_id, conversation=self.conversation, project_id="p", parent_owner="alice",
            first=first, resume=resume, report=report,
        )  # fmt: skip


def in_a_turn_of_its_own_thread(work) -> None:
    """``work()`` inside a coroutine on a new thread's own event loop (a subshell's turn), which closes
    when the turn ends."""

    async def turn() -> None:
        work()

    thread = threading.Thread(target=asyncio.run, args=(turn(),))
    thread.start()
    thread.join()


async def until(predicate, seconds: float = 10.0) -> None:
    # The bound only turns a hang into a failure.
    async with asyncio.timeout(seconds):
        while not predicate():  # noqa: ASYNC110 - the state polled here announces no event
            await asyncio.sleep(0.01)


def test_a_run_started_in_another_threads_turn_runs_on_the_registrys_loop_and_frees_its_slot(tmp_path):
    async def go():
        main = asyncio.get_running_loop()
        release = asyncio.Event()
        run = Run(tmp_path / "one", release=release)
        runs = BackgroundDelegates(limit=1)
        runs.bind()  # the kernel's main loop
        # The subshell's turn starts the run and ends: its loop closes, the run goes on.
        await asyncio.to_thread(in_a_turn_of_its_own_thread, lambda: runs.start(run.spec()))
        await until(lambda: run.loops)
        assert runs.working() == {"d-run": 1}
        release.set()
        await asyncio.gather(*runs.pending())
        assert run.loops == [main]
        assert [r.text for r in run.reports] == ["first"]
        assert runs.working() == {}
        runs.start(Run(tmp_path / "two", run_id="d-two").spec())  # the slot is free again
        await asyncio.gather(*runs.pending())

    asyncio.run(go())


@pytest.mark.parametrize("bound_by", ["main loop", "other loop"])
def test_a_run_started_on_another_loop_is_closed_from_the_main_loop(tmp_path, bound_by):
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever)
    thread.start()
    run = Run(tmp_path / "one", release=asyncio.Event())  # never released
    runs = BackgroundDelegates(limit=1)

    async def start() -> None:
        runs.start(run.spec())

    async def go():
        if bound_by == "main loop":
            runs.bind()
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(start(), other))
        await until(lambda: run.loops)
        await runs.aclose()
        assert run.cancelled
        assert runs.working() == {}
        assert runs.pending() == []

    try:
        asyncio.run(go())
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join()
        other.close()


def test_a_message_sent_from_a_thread_without_a_loop_wakes_the_run_on_the_registrys_loop(tmp_path):
    async def go():
        main = asyncio.get_running_loop()
        run = Run(tmp_path / "one")
        runs = BackgroundDelegates(limit=1)
        runs.start(run.spec())
        await asyncio.gather(*runs.pending())
        # %inbox in a subshell: it answers at once, and the run's turn runs on the registry's loop.
        sent = await asyncio.to_thread(runs.send_now, "d-run", "one more thing", ALICE)
        await until(lambda: len(run.reports) == 2)
        assert run.loops == [main, main]
        assert run.reports[-1].inbox_ids == (sent["id"],)
        await until(lambda: not runs.working())

    asyncio.run(go())


def test_runs_whose_loop_closed_under_them_hold_no_slot(tmp_path):
    runs = BackgroundDelegates(limit=1)
    run = Run(tmp_path / "one", release=asyncio.Event())

    def abandoned() -> None:
        # A loop that is closed with the run's task still pending (its thread ended abruptly).
        loop = asyncio.new_event_loop()

        async def start() -> None:
            runs.start(run.spec())
            await asyncio.sleep(0)

        loop.run_until_complete(start())
        loop.close()

    thread = threading.Thread(target=abandoned)
    thread.start()
    thread.join()

    async def go():
        assert runs.working() == {}
        again = Run(tmp_path / "two", run_id="d-two")
        runs.start(again.spec())  # the slot is free, and the registry runs on this loop now
        await asyncio.gather(*runs.pending())
        assert [r.text for r in again.reports] == ["first"]

    asyncio.run(go())
