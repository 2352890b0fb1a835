"""The loaded package set: health, handler binding, per-caller views, runtime tools, package APIs.

A ``PackageSet`` is what ``PackageLoader.load()`` returns. Its package list is fixed at load; the two
things bound later are tool handlers (``bind_handlers``: the native tools' handlers live in another
module) and in-process APIs (``register_api``). A declared tool without a handler stays declared but
is left out of every catalog, and ``health()`` says so.

Every per-caller method (``visible``, ``tools``, ``tool_registry``, ``skills``, ``agents``,
``prompt_files``, ``overview``) applies the S2 gate of :mod:`.visibility` first, so a caller never sees
a contribution whose features it lacks. Orders are deterministic: packages in load order (the builtin
first), items by name, prompt files instructions first then rules.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from ..contracts.identity import SessionContext
from ..runtime.tools import AGENT_CORE_ID, Handler, Tool, ToolRegistry
from .api import AgentCoreApi, AgentDirectory, PackageApi, require_cross_package_session
from .discovery import AgentDecl, PromptFile, SkillDecl, ToolDecl
from .errors import HandlerBindingError, PackageApiUnavailable, UnknownPackage
from .manifest import Trust
from .prompt import render_overview
from .visibility import HealthEntry, LoadedPackage, RefusedPackage, VisiblePackage, visible_package

__all__ = ["AGENT_CORE_ID", "PackageSet"]

log = logging.getLogger(__name__)


class PackageSet:
    """Loaded and refused packages, in load order."""

    def __init__(self, outcomes: Sequence[LoadedPackage | RefusedPackage]) -> None:
        self._outcomes = tuple(outcomes)
        loaded = [p for p in self._outcomes if isinstance(p, LoadedPackage)]
        self._by_id = {p.id: p for p in loaded}
        self._by_slug = {p.manifest.slug: p for p in loaded}
        if len(self._by_id) != len(loaded) or len(self._by_slug) != len(loaded):
            raise ValueError("two loaded packages share an id or a slug; the loader refuses the second")
        self._handlers: dict[tuple[str, str], Handler] = {}
        self._apis: dict[str, object] = {}
        self._agent_core = AgentCoreApi(health=self.health)
        if AGENT_CORE_ID in self._by_id:
            self._apis[AGENT_CORE_ID] = self._agent_core

    # -- the set itself ------------------------------------------------------------------------------

    @property
    def packages(self) -> tuple[LoadedPackage, ...]:
        return tuple(self._by_id.values())

    @property
    def refused(self) -> tuple[RefusedPackage, ...]:
        return tuple(p for p in self._outcomes if isinstance(p, RefusedPackage))

    def get(self, package_id: str) -> LoadedPackage:
        """The loaded package with this id (or this slug: ``agent-core`` names ``@neuralis/agent-core``)."""
        package = self._by_id.get(package_id) or self._by_slug.get(package_id)
        if package is None:
            raise UnknownPackage(package_id)
        return package

    def trust_of(self, package_id: str) -> Trust:
        """The effective trust tier of a loaded package (after the first-party clamp)."""
        return self.get(package_id).trust

    def health(self) -> list[HealthEntry]:
        """One entry per package found, loaded or refused, in load order."""
        entries: list[HealthEntry] = []
        for p in self._outcomes:
            if isinstance(p, RefusedPackage):
                entries.append(
                    HealthEntry(
                        id=p.id, status="refused", code=p.code, reason=p.reason, source=p.source, detail=[]
                    )
                )
                continue
            unbound = [
                f"tool {t.name!r} has no handler; it is declared but offered to no model"
                for t in p.contributions.tools
                if (p.id, t.name) not in self._handlers
            ]
            entries.append(
                HealthEntry(
                    id=p.id, status="ok", code=None, reason=None, source=p.source, detail=[*p.notes, *unbound]
                )
            )
        return entries

    # -- late bindings -------------------------------------------------------------------------------

    def bind_handlers(self, package_id: str, handlers: Mapping[str, Handler]) -> None:
        """Attach handlers to tools ``package_id`` declares; each tool is bound once."""
        package = self.get(package_id)
        declared = {t.name for t in package.contributions.tools}
        for name, handler in handlers.items():
            if name not in declared:
                raise HandlerBindingError(
                    f"package {package.id!r} declares no tool {name!r} (it declares {sorted(declared)})"
                )
            if not callable(handler):
                raise HandlerBindingError(f"the handler for {package.id}:{name} is not callable")
            if (package.id, name) in self._handlers:
                raise HandlerBindingError(f"tool {package.id}:{name} already has a handler")
        for name, handler in handlers.items():
            self._handlers[(package.id, name)] = handler
        log.debug("bound %d handler(s) for package %s", len(handlers), package.id)

    def register_api(self, package_id: str, api: object) -> None:
        """Register the in-process API object of a loaded package (once)."""
        package = self.get(package_id)
        if package.id in self._apis:
            raise HandlerBindingError(f"package {package.id!r} already registered an API")
        self._apis[package.id] = api

    def bind_agent_directory(self, directory: AgentDirectory) -> None:
        """Give agent-core's API the function that lists the agents a session may see."""
        self._agent_core._bind_directory(directory)

    def get_package_api(self, package_id: str, session: SessionContext) -> PackageApi:
        """The guarded in-process API of ``package_id``; refuses a session that is not cross-package."""
        require_cross_package_session(package_id, "get_package_api()", session)
        package = self.get(package_id)
        api = self._apis.get(package.id)
        if api is None:
            raise PackageApiUnavailable(f"package {package.id!r} registered no in-process API")
        return PackageApi(package.id, api)

    # -- per-caller views ----------------------------------------------------------------------------

    def visible(self, session: SessionContext) -> tuple[VisiblePackage, ...]:
        """Each package as ``session`` sees it; refused packages included, fully gated ones omitted."""
        views = (visible_package(p, session) for p in self._outcomes)
        return tuple(v for v in views if v is not None)

    def _visible_ok(self, session: SessionContext) -> list[VisiblePackage]:
        return [v for v in self.visible(session) if v.status == "ok"]

    def tools(self, session: SessionContext) -> tuple[ToolDecl, ...]:
        """The tool catalog for ``session``: visible tools that have a handler."""
        return tuple(
            t for v in self._visible_ok(session) for t in v.tools if (t.package_id, t.name) in self._handlers
        )

    def tool_registry(self, session: SessionContext) -> ToolRegistry:
        """Runtime ``Tool`` objects for :meth:`tools`; first-party tools are attested."""
        built: list[Tool] = []
        for decl in self.tools(session):
            built.append(
                Tool(
                    name=decl.name,
                    description=decl.description,
                    input_schema=decl.input_schema,
                    handler=self._handlers[(decl.package_id, decl.name)],
                    access=decl.access,
                    effects=decl.effects,
                    intrinsic=decl.intrinsic,
                    attested=self.trust_of(decl.package_id) == "first-party",
                    deterministic=decl.deterministic,
                    requires=decl.requires,
                    package_id=decl.package_id,
                    barred_from_subagents=decl.barred_from_subagents,
                )
            )
        return ToolRegistry.of(built)

    def skills(self, session: SessionContext) -> tuple[SkillDecl, ...]:
        return tuple(s for v in self._visible_ok(session) for s in sorted(v.skills, key=lambda s: s.name))

    def agents(self, session: SessionContext) -> tuple[AgentDecl, ...]:
        return tuple(a for v in self._visible_ok(session) for a in sorted(v.agents, key=lambda a: a.name))

    def prompt_files(self, session: SessionContext) -> tuple[PromptFile, ...]:
        """Every visible instruction file, then every visible rule file; package order, then file name."""
        views = self._visible_ok(session)
        return tuple(
            f
            for category in ("instruction", "rule")
            for v in views
            for f in sorted(v.prompt_files, key=lambda f: f.name)
            if f.category == category
        )

    def overview(self, session: SessionContext) -> str:
        """The ``<packages>`` block for ``session`` ('' when nothing is visible)."""
        return render_overview(self._visible_ok(session))
