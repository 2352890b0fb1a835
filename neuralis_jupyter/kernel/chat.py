"""The kernel's chat state: who talks to which agent in which conversation, with which model and guard.

One :class:`ChatController` per IPython shell (the Neuralis kernel, or a plain kernel after
``%load_ext neuralis_jupyter``). Nothing heavy is imported before the first chat cell.

Turns may run at the same time: ipykernel 7 runs a subshell's cells on the subshell's thread, beside the
main shell's. Each turn keeps the target it started with (``%agent`` or ``%conversation`` while it runs
changes the next turn only), and ``%stop`` stops every turn running in the kernel.

Headless runs (``neuralis run`` sets ``NEURALIS_HEADLESS=1``) never wait for a widget: approvals come
from the guard profile (an ask is refused, naming the profile) or from answers recorded in the cassette,
and a question takes its declared default. ``NEURALIS_CASSETTE`` (+ ``NEURALIS_CASSETTE_MODE``
``replay|record``) puts the model traffic on a cassette; ``NEURALIS_DEMO_SCRIPT`` names the script the
``scripted:demo`` model answers from.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..identity import local_user_id

if TYPE_CHECKING:
    from ..policy import LiveGuard
    from ..providers.base import Model
    from ..providers.cassette import Cassette
    from ..runtime import StopSignal
    from ..runtime.events import TurnSettled
    from ..workbench import ChatTarget, Workbench
    from .display import TurnDisplay
    from .notebook_tools import CodeRunner

__all__ = ["ChatController"]


class ChatController:
    def __init__(self, shell: Any) -> None:
        self.shell = shell
        # Who this kernel acts for, fixed when it starts: a cell that edits os.environ later must not
        # turn the next turn into someone else's.
        self._user_id = local_user_id()
        self.project_id: str | None = None
        self.agent_id: str | None = None
        self.conversation_id: str | None = None
        self.model_ref: str | None = os.environ.get("NEURALIS_MODEL") or None
        self.headless = os.environ.get("NEURALIS_HEADLESS") == "1"
        self.last: TurnSettled | None = None
        self._bench: Workbench | None = None
        self._guard: LiveGuard | None = None
        self._cassette: Cassette | None = None
        # Every turn running in this kernel: the main shell's and any subshell's (see the module docstring).
        # Threads add, remove and read them: under the lock.
        self._turns: list[_RunningTurn] = []
        self._turns_lock = threading.Lock()
        self._display_factory: Any = None

    # -- lazily built state ----------------------------------------------------------------------

    @property
    def bench(self) -> Workbench:
        if self._bench is None:
            from ..workbench import Workbench

            self._bench = Workbench()
        return self._bench

    @property
    def user_id(self) -> str:
        return self._user_id

    def target(self) -> ChatTarget:
        """The current chat target; the first call creates the conversation and keeps it."""
        target = self.bench.target(
            self.user_id,
            project_id=self.project_id,
            agent_id=self.agent_id,
            conversation_id=self.conversation_id,
        )
        self._adopt(target)
        return target

    def retarget(self, *, agent_id: str | None, conversation_id: str | None) -> ChatTarget:
        """Point the next turns at ``agent_id`` (``None``: the project's default agent) and the
        conversation ``conversation_id`` of it (``None``: a new one). The target is checked first: when
        the agent or the conversation cannot be opened this raises and nothing changes."""
        target = self.bench.target(
            self.user_id,
            project_id=self.project_id,
            agent_id=agent_id,
            conversation_id=conversation_id,
        )
        self._adopt(target)
        return target

    def _adopt(self, target: ChatTarget) -> None:
        self.conversation_id = target.conversation.id
        self.agent_id = target.agent.id
        self.project_id = target.session.project_id

    def check_model(self, ref: str) -> None:
        """Refuse a model reference no turn could use, before it is set: a bad ``%model`` would
        otherwise fail every later chat cell."""
        from ..providers.catalog import parse_model_ref
        from ..providers.errors import UnknownModel

        provider, model = parse_model_ref(ref)
        if _is_demo(ref):
            return
        catalog = self.bench.catalog
        if provider not in catalog.providers():
            raise UnknownModel(ref, f"the providers are {', '.join(catalog.providers())}")
        if provider != "openai":  # an OpenAI-compatible server may serve models the catalog does not list
            catalog.get(provider, model)

    @property
    def guard(self) -> LiveGuard:
        if self._guard is None:
            from ..policy import LiveGuard

            target = self.target()
            self._guard = LiveGuard(self.bench.guard_profile(target))
        return self._guard

    def set_guard(self, profile: str) -> None:
        """Flip the guard; a running turn sees it at its next tool decision. The notebook's choice
        also clears an override a server route may have written for this conversation."""
        self.guard.set(profile)  # type: ignore[arg-type]
        if self.conversation_id is not None:
            from ..store.interactions import GuardOverrideStore

            GuardOverrideStore(self.bench.store.engine).clear(
                project_id=self.project_id or "default", conversation_id=self.conversation_id
            )

    @property
    def cassette(self) -> Cassette | None:
        path = os.environ.get("NEURALIS_CASSETTE")
        if path and self._cassette is None:
            from ..providers.cassette import Cassette

            mode = os.environ.get("NEURALIS_CASSETTE_MODE", "replay")
            self._cassette = Cassette(path, "record" if mode == "record" else "replay")
        return self._cassette

    def model(self, target: ChatTarget) -> Model:
        from ..providers.cassette import CassetteModel

        cassette = self.cassette
        if cassette is not None and cassette.mode == "replay":
            return CassetteModel(cassette)
        ref = self.bench.model_ref(target, self.model_ref) if not _is_demo(self.model_ref) else self.model_ref
        live = _demo_model() if _is_demo(ref) else self.bench.model(target, ref)
        if cassette is not None:
            return CassetteModel(cassette, live)
        return live

    # -- a chat cell -----------------------------------------------------------------------------

    async def run(self, message: str) -> TurnSettled | None:
        from ..runtime.events import TurnSettled

        bench = self.bench
        # The store, the project and the credentials are files and SQL: read them off the event loop.
        target = await asyncio.to_thread(self.target)
        model = await asyncio.to_thread(self.model, target)
        cassette = self.cassette
        if cassette is not None:
            cassette.volatile_value(target.conversation.id, "conversation_id")
            cassette.volatile_value(str(bench.store.data_root.root), "data_root")
            cassette.volatile_value(f"`{target.session.user_id}`", "user")  # the prompt names the user
        display = self._new_display(target)
        if self.headless:  # answers given to `neuralis run --answer` or recorded, else the guard decides
            from .headless import headless_answerers

            approver, answerer = headless_answerers(cassette)
        else:
            approver, answerer = display, _Answerer(display)
        from .notebook_tools import CodeRunner, notebook_tools

        settled: TurnSettled | None = None
        async with bench.turn(
            target,
            message,
            model=model,
            guard=self.guard,
            approver=approver,
            answerer=answerer,
            tape=cassette,
            on_event=display.handle,
        ) as request:
            _bind_background_runs(bench)
            runner = CodeRunner(poll=self._stop_poll(target))
            request = replace(request, tools=request.tools.merge(notebook_tools(self.shell, runner)))
            # The turn keeps its own ids: a %conversation or %agent while it runs points the next turn
            # elsewhere, and a stop must still reach this one (and name its conversation in the store).
            running = _RunningTurn(
                project_id=target.session.project_id,
                conversation_id=target.conversation.id,
                stop=request.stop,
                runner=runner,
                loop=asyncio.get_running_loop(),
            )
            with self._turns_lock:
                self._turns.append(running)
            try:
                with _interrupt_stops(request.stop):
                    async for event in bench.runtime.run_turn(request):
                        display.handle(event)
                        if isinstance(event, TurnSettled):
                            settled = event
            finally:
                with self._turns_lock:
                    self._turns.remove(running)
                display.finish(settled)
        self.last = settled
        if self.headless:
            # Nobody will watch this notebook later: background work reports back (and the turn it
            # continues runs) inside this cell, so the saved notebook holds it.
            await bench.drain_background(bench.settings.background_wait)
        return settled

    def _new_display(self, target: ChatTarget) -> TurnDisplay:
        if self._display_factory is None:
            try:
                from .cards import CardDisplay as factory
            except ImportError:
                from .display import MarkdownDisplay as factory
            self._display_factory = factory
        display: TurnDisplay = self._display_factory(
            display_id="nrs-" + uuid.uuid4().hex[:12],
            conversation=target.conversation,
            live=not self.headless,
        )
        # A background report of this conversation goes to its last display, which finds the card of
        # the call that started the work (in whichever cell) before the report's continuation runs.
        return display

    async def aclose(self) -> None:
        """Stop background shells and sub-agents (the kernel is shutting down)."""
        if self._bench is not None:
            await self._bench.aclose()

    # -- stopping --------------------------------------------------------------------------------

    def request_stop(self, reason: str = "stopped from the notebook") -> int:
        """Stop every turn running in this kernel, from any thread (a %stop in a subshell, a widget's
        Stop button); how many were running.

        Also writes a stop request to the store for each running turn's conversation and for the
        notebook's current one, so a turn of them running elsewhere (another kernel, the server, a
        background report's continuation) stops too.
        """
        with self._turns_lock:
            turns = list(self._turns)
        conversations = {(t.project_id, t.conversation_id) for t in turns}
        if self.conversation_id is not None:
            conversations.add((self.project_id or "default", self.conversation_id))
        if self._bench is not None:
            for project_id, conversation_id in conversations:
                self._bench.store.stops.request(
                    project_id=project_id,
                    conversation_id=conversation_id,
                    requested_by=self.user_id,
                    reason=reason,
                )
        for turn in turns:
            if _running_loop() is turn.loop:
                turn.stop.set(reason)
            else:
                turn.loop.call_soon_threadsafe(turn.stop.set, reason)
            # The notebook's python code blocks the main thread's loop while it runs: the stop above
            # waits for it, so interrupt it (a no-op when no python call of this turn is running).
            turn.runner.interrupt(reason)
        return len(turns)

    def _stop_poll(self, target: ChatTarget) -> Callable[[], bool]:
        """Whether a stop for this turn was written to the store (by a server route, another kernel):
        what the turn's own stop polls, for the python runner to poll while the code blocks the loop."""
        since = datetime.now(UTC)
        stops = self.bench.store.stops
        project_id, conversation_id = target.session.project_id, target.conversation.id

        def requested() -> bool:
            return stops.requested(project_id=project_id, conversation_id=conversation_id, since=since)

        return requested


@dataclass(frozen=True, kw_only=True)
class _RunningTurn:
    """A turn running in this kernel, with what a stop from another thread needs to reach it."""

    project_id: str
    conversation_id: str
    stop: StopSignal
    #: Runs the turn's ``python`` calls; interrupts one running on the main thread.
    runner: CodeRunner
    #: The loop the turn runs on: the main shell's, or a subshell's.
    loop: asyncio.AbstractEventLoop


class _Answerer:
    def __init__(self, display: TurnDisplay) -> None:
        self._display = display

    async def ask(
        self, *, question: str, options: list[dict[str, Any]], multiple: bool, tool_use_id: str
    ) -> Any:
        return await self._display.answer(
            question=question, options=options, multiple=multiple, tool_use_id=tool_use_id
        )


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@contextlib.contextmanager
def _interrupt_stops(stop: StopSignal) -> Iterator[None]:
    """While a turn runs, the kernel's interrupt stops it cleanly (the partial answer is kept)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()

    def on_sigint(*_: object) -> None:
        loop.call_soon_threadsafe(stop.set, "interrupted")

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _is_demo(ref: str | None) -> bool:
    return bool(ref) and str(ref).startswith("scripted:")


_demo_models: dict[str, Model] = {}


def _demo_model() -> Model:
    """The scripted demo model, answering from ``$NEURALIS_DEMO_SCRIPT`` (one reply a line). One model
    per script for the kernel's life: each chat cell takes the next replies, not the first ones again."""
    from ..providers.scripted import ScriptedModel
    from ..testing.fake_llm import load_script

    path = os.environ.get("NEURALIS_DEMO_SCRIPT")
    if not path:
        raise ValueError(
            "the scripted demo model needs a script: set NEURALIS_DEMO_SCRIPT to a JSONL file of replies"
        )
    if path not in _demo_models:
        _demo_models[path] = ScriptedModel(load_script(path))
    return _demo_models[path]


def _bind_background_runs(bench: Workbench) -> None:
    """Background sub-agent runs live on the kernel's main loop, which outlives every subshell's: a
    run started from a subshell turn would otherwise die with that subshell's loop."""
    if threading.current_thread() is not threading.main_thread():
        return
    runs = bench.tool_env.services.get("delegates")
    if runs is not None:
        runs.bind(asyncio.get_running_loop())
