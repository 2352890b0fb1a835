"""The host side of a turn: from a verified user to a ready :class:`TurnRequest`.

The kernel, the server extension and the CLI all run turns the same way: a verified user id becomes a
session through project membership, the agent is resolved (the project's default agent is provisioned
on first use), the conversation is found or created, the model is resolved in one documented order,
and the stop signal watches both the process and the store. :class:`Workbench` is that one path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import Literal

from .config import NeuralisSettings, load_settings
from .contracts.agent_access import can_open_conversation, can_read_agent
from .contracts.identity import SessionContext, create_system_session
from .packages import AGENT_CORE_ID, PackageLoader, PackageSet
from .policy import (
    Approver,
    LiveGuard,
    PolicyConfig,
    PolicyEngine,
    StoreGuard,
    hooks_from_config,
    project_session_source,
)
from .prompt import AssembledPrompt
from .providers import build_model
from .providers.base import Model
from .providers.catalog import Catalog, load_catalog
from .providers.credentials import PROVIDER_KEYS, has_credentials
from .providers.errors import NoModelConfigured
from .runtime import LIVE, AgentRuntime, ExecutionMode, StopSignal, ToolRegistry, TurnRequest
from .runtime.context import ToolTape
from .runtime.events import BackgroundReport, RuntimeEvent
from .runtime.loop import new_request_id
from .store import AlreadyExists, NotFound, Store
from .store.agents import AgentRecord
from .store.conversations import Conversation
from .store.interactions import GuardOverrideStore
from .store.projects import DEFAULT_PROJECT_ID, Project, local_user_id
from .tools import ToolEnvironment, compact, native_handlers, todos
from .tools.environment import Answerer, answering
from .tools.wait import SeenReports

__all__ = ["AgentNotVisible", "ChatTarget", "Workbench"]

log = logging.getLogger(__name__)
#: Seconds between two tries at a conversation another event loop is running a turn in.
_GATE_POLL = 0.02

#: The order in which providers are tried when nothing names a model.
MODEL_PROVIDER_ORDER: tuple[str, ...] = ("anthropic", "openai")


class AgentNotVisible(NotFound):
    """The agent does not exist or the caller may not read it; the same answer either way."""

    def __init__(self, agent_id: str) -> None:
        super().__init__("agent", agent_id)


@dataclass(frozen=True, kw_only=True)
class ChatTarget:
    """Who talks to which agent in which conversation."""

    session: SessionContext
    project: Project
    agent: AgentRecord
    conversation: Conversation


class Workbench:
    """Everything a host needs to run turns for verified users."""

    def __init__(self, settings: NeuralisSettings | None = None, *, store: Store | None = None) -> None:
        self.settings = settings or (store.settings if store else load_settings())
        self.store = store or Store(self.settings)
        self.catalog: Catalog = load_catalog(self.settings.catalog_path or None)
        self.runtime = AgentRuntime(self.store, catalog=self.catalog, max_steps=self.settings.max_agent_steps)
        # Turns may run on several threads' event loops at once (a kernel's subshells): see _hold.
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
            weakref.WeakKeyDictionary()
        )
        self._gates: dict[str, threading.Lock] = {}
        self._gates_guard = threading.Lock()

    # -- identity ---------------------------------------------------------------------------------

    def session(self, user_id: str, project_id: str | None = None) -> SessionContext:
        """The session of a VERIFIED user; the default project is created for the local user."""
        project_id = project_id or DEFAULT_PROJECT_ID
        if project_id == DEFAULT_PROJECT_ID:
            self.store.projects.ensure_default(owner=local_user_id())
        return self.store.projects.session_for(user_id, project_id)

    def agent(self, session: SessionContext, agent_id: str | None = None) -> AgentRecord:
        """The agent the caller talks to. The project's default agent is everyone's in the project:
        it is provisioned on first use for the project's owner, and every member may use it."""
        project = self.store.projects.get(session.project_id)
        default_id = project.default_agent or self.settings.default_agent
        wanted = agent_id or default_id
        try:
            record = self.store.agents.get(session.project_id, wanted)
        except NotFound:
            if wanted != default_id:
                raise AgentNotVisible(wanted) from None
            owner = SessionContext(user_id=project.owner_id, project_id=project.id)
            provisioner = create_system_session("bootstrap", "agent-core", owner)
            try:
                record = self.store.agents.create(
                    provisioner, name=wanted.replace("-", " ").title(), agent_id=wanted
                )
            except AlreadyExists:  # another turn or process provisioned it first: use theirs
                record = self.store.agents.get(session.project_id, wanted)
        if record.id != default_id and not can_read_agent(session, record.id, created_by=record.created_by):
            raise AgentNotVisible(record.id)
        return record

    def target(
        self,
        user_id: str,
        *,
        project_id: str | None = None,
        agent_id: str | None = None,
        conversation_id: str | None = None,
    ) -> ChatTarget:
        """Who talks to which agent in which conversation. A conversation the caller may not open
        answers exactly like one that does not exist."""
        session = self.session(user_id, project_id)
        agent = self.agent(session, agent_id)
        if conversation_id:
            conversation = self.store.conversations.find(
                project_id=session.project_id, agent_id=agent.id, conversation_id=conversation_id
            )
            if not can_open_conversation(session, owner=conversation.read_meta()["user_id"]):
                raise NotFound("conversation", conversation_id)
        else:
            conversation = self.store.conversations.create(
                project_id=session.project_id, agent_id=agent.id, user_id=session.user_id
            )
        session = session.replace(agent_id=agent.id, conversation_id=conversation.id)
        return ChatTarget(
            session=session,
            project=self.store.projects.get(session.project_id),
            agent=agent,
            conversation=conversation,
        )

    # -- models -----------------------------------------------------------------------------------

    def model_ref(self, target: ChatTarget, explicit: str | None = None) -> str:
        """The model to use: explicit, else the agent's, else the project's, else the catalog default of
        the first provider with credentials (Anthropic, then OpenAI)."""
        for ref in (explicit, target.agent.model, target.project.default_model):
            if ref:
                return ref
        for provider in MODEL_PROVIDER_ORDER:
            if has_credentials(
                provider,
                data_root=self.store.data_root,
                project_id=target.session.project_id,
                base_url=self.base_urls.get(provider) or None,
            ):
                return self.catalog.default_for(provider).ref
        variables = tuple(v for p in MODEL_PROVIDER_ORDER for v in PROVIDER_KEYS[p].api_key_vars)
        raise NoModelConfigured(variables)

    @property
    def base_urls(self) -> dict[str, str]:
        """The provider endpoints set in the configuration (empty: the environment's, then the project
        credential file's, then the SDK's)."""
        return {"anthropic": self.settings.anthropic_base_url, "openai": self.settings.openai_base_url}

    def model(self, target: ChatTarget, explicit: str | None = None) -> Model:
        return build_model(
            self.model_ref(target, explicit),
            data_root=self.store.data_root,
            project_id=target.session.project_id,
            catalog=self.catalog,
            base_urls=self.base_urls,
        )

    # -- turn plumbing ----------------------------------------------------------------------------

    def stop_signal(self, target: ChatTarget) -> StopSignal:
        """A stop that also answers to a stop request written to the store after this moment."""
        since = datetime.now(UTC)
        stops = self.store.stops
        session = target.session
        conversation_id = target.conversation.id

        def requested() -> bool:
            return stops.requested(
                project_id=session.project_id, conversation_id=conversation_id, since=since
            )

        return StopSignal(poll=requested)

    # -- packages, policy, prompt ----------------------------------------------------------------

    @cached_property
    def _loaded_packages(self) -> PackageSet:
        return PackageLoader.from_settings(self.settings).load()

    @cached_property
    def tool_env(self) -> ToolEnvironment:
        """What the native tools get from this host. A kernel sets ``answerer``; a host may replace
        ``services["continue"]`` (called as :meth:`continue_conversation` is) to show a background
        report's continuation its own way. ``services["seen_reports"]`` holds the reports a ``wait``
        already handed to the model, whose continuation is skipped."""
        return ToolEnvironment(
            settings=self.settings,
            store=self.store,
            packages=self._loaded_packages,
            config=self.settings.config,
            api_url=os.environ.get("NEURALIS_API_URL") or None,
            services={"continue": self.continue_conversation, "seen_reports": SeenReports()},
        )

    @cached_property
    def packages(self) -> PackageSet:
        packages = self._loaded_packages
        packages.bind_handlers(AGENT_CORE_ID, native_handlers(self.tool_env))
        return packages

    def tools(self, target: ChatTarget) -> ToolRegistry:
        """The tools the caller's agent may use: visible, feature-gated, bound to a handler."""
        return self.packages.tool_registry(target.session)

    def guard_profile(self, target: ChatTarget, explicit: str | None = None) -> str:
        """Explicit (``--guard``, ``%guard``), else the administrator's, else the project's."""
        return explicit or self.settings.guard or target.project.guard

    def policy_config(self, target: ChatTarget) -> PolicyConfig:
        admin = PolicyConfig.from_json(self.settings.policy)
        project = PolicyConfig.from_json(target.project.policy)
        allow: tuple[str, ...] | None
        if admin.allowlist is not None and project.allowlist is not None:
            allow = tuple(g for g in project.allowlist if g in admin.allowlist)
        else:
            allow = admin.allowlist if admin.allowlist is not None else project.allowlist
        return replace(
            admin,
            blocklist=(*admin.blocklist, *project.blocklist),
            allowlist=allow,
            # Which third-party tools may pass a trust ceiling is the administrator's call alone.
            ceiling_allowlist=admin.ceiling_allowlist,
        )

    def hooks(self, target: ChatTarget) -> list:
        admin = list(self.settings.hooks)
        for entry in admin:
            if entry.get("source") not in ("admin", "managed"):
                raise ValueError(
                    f"hooks in c.NeuralisSettings.hooks must have source 'admin' or 'managed', got {entry!r}"
                )
        # A project file cannot claim a stronger source than its own.
        project = [{**h, "source": "project"} for h in target.project.hooks]
        return hooks_from_config([*admin, *project])

    def policy(
        self, target: ChatTarget, *, guard: LiveGuard, approver: Approver | None = None
    ) -> tuple[PolicyEngine, StoreGuard]:
        """The turn's policy engine and the live guard source it reads at every decision.

        A guard override written to the store (a server route flipping a running turn) wins over
        ``guard``, the in-process holder the kernel's ``%guard`` sets.
        """
        source = StoreGuard(
            GuardOverrideStore(self.store.engine),
            project_id=target.session.project_id,
            conversation_id=target.conversation.id,
            fallback=guard,
        )
        engine = PolicyEngine(
            self.store,
            config=self.policy_config(target),
            guard=source,
            hooks=self.hooks(target),
            approver=approver,
            trust_of=self.packages.trust_of,
            session_source=project_session_source(self.store.projects),
            approval_timeout=float(self.settings.approval_timeout),
        )
        return engine, source

    def prompt(self, target: ChatTarget, guard: StoreGuard) -> AssembledPrompt:
        return AssembledPrompt(
            identity_files=self.store.agents.identity_files(target.session.project_id, target.agent.id),
            packages=self.packages,
            guard=guard.current,
            sections=[todos.session_section(target.conversation)],
        )

    @contextlib.asynccontextmanager
    async def _hold(self, conversation_id: str) -> AsyncIterator[None]:
        """One turn at a time per conversation in this process; a report's continuation waits.

        Turns may run on several event loops at once (a kernel's subshells each have their own), so
        the asyncio lock (fair, per loop) is backed by one thread lock per conversation, taken without
        blocking the loop; polling keeps a cancelled wait from acquiring it after it gave up."""
        loop = asyncio.get_running_loop()
        with self._gates_guard:
            local = self._locks.setdefault(loop, {}).setdefault(conversation_id, asyncio.Lock())
            gate = self._gates.setdefault(conversation_id, threading.Lock())
        async with local:
            while True:
                if gate.acquire(blocking=False):
                    break
                await asyncio.sleep(_GATE_POLL)
            try:
                yield
            finally:
                gate.release()

    @cached_property
    def _last_turns(self) -> dict[str, _TurnSetup]:
        return {}

    @contextlib.asynccontextmanager
    async def turn(
        self,
        target: ChatTarget,
        message: str | None,
        *,
        model: Model,
        guard: LiveGuard | None = None,
        approver: Approver | None = None,
        answerer: Answerer | Literal["host"] | None = "host",
        mode: ExecutionMode = LIVE,
        stop: StopSignal | None = None,
        tape: ToolTape | None = None,
        on_event: Callable[[RuntimeEvent], None] | None = None,
    ) -> AsyncIterator[TurnRequest]:
        """A ready turn. It holds the conversation (one turn at a time), and its stream scope is live
        while the block runs, so session tickets minted for it verify; leaving the block ends the scope
        and every ticket with it. ``on_event`` is remembered for the continuation of background
        reports in this conversation. ``answerer`` answers this turn's questions (``None``: nobody;
        "host": ``tool_env.answerer``), so that turns running at once each ask their own cell."""
        session = target.session.replace(request_id=new_request_id())
        target = replace(target, session=session)
        live = guard or LiveGuard(self.guard_profile(target))
        self._last_turns[target.conversation.id] = _TurnSetup(
            model=model, guard=live, approver=approver, answerer=answerer, tape=tape, on_event=on_event
        )

        def setup() -> tuple[PolicyEngine, ToolRegistry, AssembledPrompt]:
            # File and SQL reads (packages on first use, project settings, identity files): in a thread.
            engine, source = self.policy(target, guard=live, approver=approver)
            return engine, self.tools(target), self.prompt(target, source)

        async with self._hold(target.conversation.id):
            engine, tools, prompt = await asyncio.to_thread(setup)
            history = await compact.history_transform(target.conversation)
            await asyncio.to_thread(self.store.tickets.open_stream, session)
            questions = contextlib.nullcontext() if answerer == "host" else answering(answerer)
            try:
                with questions:
                    yield TurnRequest(
                        session=session,
                        conversation=target.conversation,
                        model=model,
                        tools=tools,
                        message=message,
                        mode=mode,
                        prompt=prompt,
                        permission=engine,
                        policy=engine,
                        stop=stop or self.stop_signal(target),
                        tape=tape,
                        history=history,
                        step_ceiling=todos.step_ceiling(target.conversation),
                    )
            finally:
                await asyncio.to_thread(self.store.tickets.end_stream, session.request_id)

    async def continue_conversation(
        self,
        session: SessionContext,
        conversation: Conversation,
        report: BackgroundReport,
        *,
        owed: Callable[[], bool] | None = None,
    ) -> None:
        """Run the turn a background report asks for: as the session that started the work, with the
        model, guard and approver of the conversation's last turn in this process.

        ``owed`` says whether the report still needs that turn; it is asked again once this turn holds
        the conversation, because a turn that held it before may have read the report through ``wait``
        meanwhile, and answering it twice would repeat work. Without ``owed``, a report counts as read
        once a wait in the conversation handed over a report of the same job (right for a shell, which
        reports once; a sub-agent run, which reports once per turn, passes its own)."""
        seen = self.tool_env.services.get("seen_reports")

        def unread() -> bool:
            return not isinstance(seen, SeenReports) or not seen.seen(conversation.id, report.shell_id)

        still_owed = owed or unread
        setup = self._last_turns.get(conversation.id)
        if setup is None:
            log.info("no turn to continue %s with; the report waits for the next turn", conversation.id)
            return
        if setup.on_event is not None:
            setup.on_event(report)  # e.g. the kernel's card for the shell that reported
        if not still_owed():
            return
        target = await asyncio.to_thread(
            self.target,
            session.user_id,
            project_id=session.project_id,
            agent_id=session.agent_id,
            conversation_id=conversation.id,
        )
        async with self.turn(
            target,
            None,
            model=setup.model,
            guard=setup.guard,
            approver=setup.approver,
            answerer=setup.answerer,
            tape=setup.tape,
            on_event=setup.on_event,
        ) as request:
            if not still_owed():
                log.info(
                    "%s's report was read by a wait in %s; no turn answers it",
                    report.shell_id,
                    target.conversation.id,
                )
                return
            await self.runtime.run(request, on_event=setup.on_event)

    async def drain_background(self, wait_seconds: float) -> bool:
        """Wait for background shells and sub-agents (and the turns their reports start); False when
        ``wait_seconds`` passed first."""
        deadline = asyncio.get_running_loop().time() + wait_seconds
        while True:
            pending: list[asyncio.Future[object]] = []
            shells = self.tool_env.services.get("shells")
            if shells is not None:
                pending += shells.pending()
            delegates = self.tool_env.services.get("delegates")
            if delegates is not None:
                pending += delegates.pending()  # working runs and the parent turns their reports start
            if not pending:
                return True
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            await asyncio.wait(pending, timeout=left)

    async def aclose(self) -> None:
        """Stop what outlives turns in this process: background shells and sub-agents."""
        for name in ("shells", "delegates"):
            service = self.tool_env.services.get(name)
            if service is not None:
                await service.aclose()


@dataclass(frozen=True, kw_only=True)
class _TurnSetup:
    model: Model
    guard: LiveGuard
    approver: Approver | None
    answerer: Answerer | Literal["host"] | None
    tape: ToolTape | None
    on_event: Callable[[RuntimeEvent], None] | None
