"""The host side of a turn: from a verified user to a ready :class:`TurnRequest`.

The kernel, the server extension and the CLI all run turns the same way: a verified user id becomes a
session through project membership, the agent is resolved (the project's default agent is provisioned
on first use), the conversation is found or created, the model is resolved in one documented order,
and the stop signal watches both the process and the store. :class:`Workbench` is that one path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property

from .config import NeuralisSettings, load_settings
from .contracts.agent_access import can_read_agent
from .contracts.identity import SessionContext, create_system_session
from .packages import PackageLoader, PackageSet
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
from .runtime.loop import new_request_id
from .runtime.results import read_tool_result_tool
from .store import NotFound, Store
from .store.agents import AgentRecord
from .store.conversations import Conversation
from .store.interactions import GuardOverrideStore
from .store.projects import DEFAULT_PROJECT_ID, Project, local_user_id

__all__ = ["AgentNotVisible", "ChatTarget", "Workbench"]

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

    # -- identity ---------------------------------------------------------------------------------

    def session(self, user_id: str, project_id: str | None = None) -> SessionContext:
        """The session of a VERIFIED user; the default project is created for the local user."""
        project_id = project_id or DEFAULT_PROJECT_ID
        if project_id == DEFAULT_PROJECT_ID:
            self.store.projects.ensure_default(owner=local_user_id())
        return self.store.projects.session_for(user_id, project_id)

    def agent(self, session: SessionContext, agent_id: str | None = None) -> AgentRecord:
        project = self.store.projects.get(session.project_id)
        wanted = agent_id or project.default_agent or self.settings.default_agent
        try:
            record = self.store.agents.get(session.project_id, wanted)
        except NotFound:
            if agent_id is not None and agent_id != (project.default_agent or self.settings.default_agent):
                raise AgentNotVisible(agent_id) from None
            # The project's default agent is provisioned on first use, by the platform, for this user.
            provisioner = create_system_session("bootstrap", "agent-core", session)
            record = self.store.agents.create(
                provisioner, name=wanted.replace("-", " ").title(), agent_id=wanted
            )
        if not can_read_agent(session, record.id, created_by=record.created_by):
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
        session = self.session(user_id, project_id)
        agent = self.agent(session, agent_id)
        if conversation_id:
            conversation = self.store.conversations.find(
                project_id=session.project_id, agent_id=agent.id, conversation_id=conversation_id
            )
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
                provider, data_root=self.store.data_root, project_id=target.session.project_id
            ):
                return self.catalog.default_for(provider).ref
        variables = tuple(v for p in MODEL_PROVIDER_ORDER for v in PROVIDER_KEYS[p].api_key_vars)
        raise NoModelConfigured(variables)

    def model(self, target: ChatTarget, explicit: str | None = None) -> Model:
        return build_model(
            self.model_ref(target, explicit),
            data_root=self.store.data_root,
            project_id=target.session.project_id,
            catalog=self.catalog,
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
    def packages(self) -> PackageSet:
        packages = PackageLoader.from_settings(self.settings).load()
        packages.bind_handlers("@neuralis/agent-core", {"read_tool_result": read_tool_result_tool().handler})
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
        )

    @contextlib.asynccontextmanager
    async def turn(
        self,
        target: ChatTarget,
        message: str | None,
        *,
        model: Model,
        guard: LiveGuard | None = None,
        approver: Approver | None = None,
        mode: ExecutionMode = LIVE,
        stop: StopSignal | None = None,
        tape: ToolTape | None = None,
    ) -> AsyncIterator[TurnRequest]:
        """A ready turn. Its stream scope is live while the block runs, so session tickets minted
        for it verify; leaving the block ends the scope and every ticket with it."""
        session = target.session.replace(request_id=new_request_id())
        target = replace(target, session=session)
        live = guard or LiveGuard(self.guard_profile(target))
        engine, source = self.policy(target, guard=live, approver=approver)
        await asyncio.to_thread(self.store.tickets.open_stream, session)
        try:
            yield TurnRequest(
                session=session,
                conversation=target.conversation,
                model=model,
                tools=self.tools(target),
                message=message,
                mode=mode,
                prompt=self.prompt(target, source),
                permission=engine,
                policy=engine,
                stop=stop or self.stop_signal(target),
                tape=tape,
            )
        finally:
            await asyncio.to_thread(self.store.tickets.end_stream, session.request_id)
