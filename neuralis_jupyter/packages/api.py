"""In-process package APIs: one package calling another, never over MCP and never over HTTP.

A package registers a plain object (an entry point's ``API`` attribute, or
``PackageSet.register_api``). Callers never get that object: ``PackageSet.get_package_api`` hands out
a :class:`PackageApi` guard that forwards public method calls only, and only when the call carries a
:class:`~neuralis_jupyter.contracts.identity.CrossPackageSession` as its first argument or as
``session=``. Anything else raises :class:`CrossPackageSessionRequired` before the method runs.

The guard enforces the calling discipline between packages that share one process; it is not a
sandbox against code that sets out to defeat it (in-process Python can reach any object).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..contracts.identity import CrossPackageSession, SessionContext
from .errors import CrossPackageSessionRequired, PackageApiUnavailable
from .visibility import HealthEntry

__all__ = ["AgentCoreApi", "AgentDirectory", "PackageApi", "require_cross_package_session"]

#: Lists the agents the session may see; bound by the host once the store is up.
AgentDirectory = Callable[[SessionContext], Sequence[object]]


def _describe(value: object) -> str:
    if value is None:
        return "no session"
    if isinstance(value, SessionContext):
        return f"a plain {type(value).__name__}"
    return f"a {type(value).__name__} where the session belongs"


def require_cross_package_session(package_id: str, what: str, session: object) -> CrossPackageSession:
    """``session`` when it is a CrossPackageSession; otherwise raise CrossPackageSessionRequired."""
    if not isinstance(session, CrossPackageSession):
        raise CrossPackageSessionRequired(package_id, what, _describe(session))
    return session


class PackageApi:
    """A guard around a package's API object; forwards public methods called with a cross-package session."""

    __slots__ = ("_package_id", "_target")

    def __init__(self, package_id: str, target: object) -> None:
        object.__setattr__(self, "_package_id", package_id)
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(f"package {self._package_id!r} API: {name!r} is private")
        attr = getattr(self._target, name)
        if not callable(attr):
            raise AttributeError(f"package {self._package_id!r} API: {name!r} is not a method")
        package_id = self._package_id

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            session = kwargs["session"] if "session" in kwargs else (args[0] if args else None)
            require_cross_package_session(package_id, f"{name}()", session)
            return attr(*args, **kwargs)

        return call

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"package {self._package_id!r} API is read-only")

    def __repr__(self) -> str:
        return f"<PackageApi {self._package_id}>"


class AgentCoreApi:
    """agent-core's own in-process API, kept small; every method takes the caller's session first."""

    def __init__(self, *, health: Callable[[], list[HealthEntry]]) -> None:
        self._health = health
        self._directory: AgentDirectory | None = None

    def _bind_directory(self, directory: AgentDirectory) -> None:
        self._directory = directory

    def list_agents(self, session: CrossPackageSession) -> Sequence[object]:
        """The agents ``session`` may see, from the directory the host bound."""
        if self._directory is None:
            raise PackageApiUnavailable(
                "agent-core has no agent directory yet; the host binds one with "
                "PackageSet.bind_agent_directory() when its store is ready"
            )
        return self._directory(session)

    def package_health(self, session: CrossPackageSession) -> list[HealthEntry]:
        """Every package's load status, refused ones included."""
        return self._health()
