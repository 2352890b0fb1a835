"""Features, default role grants and the two access predicates (seed 000, "Feature taxonomy").

Authorization reads a session's ``granted_features`` and ``priority``; it never reads the role name, so
a custom role behaves exactly as its declared priority and grants say. A session with no granted
features holds nothing: deny by default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .identity import AgentAccess, SessionContext

__all__ = [
    "ADMIN_GRANTS",
    "DEFAULT_ROLES",
    "ESCALATION_ONLY",
    "FEATURES",
    "ROLE_PRIORITIES",
    "WILDCARD",
    "Feature",
    "Requires",
    "Role",
    "has_feature",
    "meets_requires",
]

WILDCARD = "*"


@dataclass(frozen=True, kw_only=True)
class Feature:
    id: str
    title: str
    description: str
    #: Carries no default grant below the admin tier.
    escalation_only: bool = False


def _f(id: str, title: str, description: str, *, escalation: bool = False) -> Feature:
    return Feature(id=id, title=title, description=description, escalation_only=escalation)


_TAXONOMY: tuple[Feature, ...] = (
    _f("core.agents", "Agents", "Create, read, update and delete agents."),
    _f(
        "core.execute",
        "Run agents",
        "Run an agent: streams, interactions, conversations; also gates the execute tool.",
    ),
    _f(
        "core.observe",
        "Observe",
        "Read-only introspection: usage, tool and file catalogs, packages, models, MCP servers.",
    ),
    _f("core.web", "Web tools", "Use the web_search and web_fetch tools."),
    _f("workflow.read", "Read workflows", "See scheduled workflows and their runs."),
    _f("workflow.write", "Edit workflows", "Create, change and delete scheduled workflows."),
    _f("workflow.dispatch", "Dispatch workflows", "Start a workflow run now."),
    _f(
        "channels.connect",
        "Connect channels",
        "Connect your own chat channels and approve pairings.",
    ),
    _f("mcp.connect", "Connect MCP servers", "Connect your own external MCP servers."),
    _f("git.connect", "Connect git", "Connect your own git remotes with your own tokens."),
    _f("credentials.self", "Own credentials", "Set, remove and list your own credentials."),
    _f("core.prompt-polish", "Prompt polish", "Ask the model to rewrite a draft prompt."),
    _f("terminal.read", "Terminal", "See and open the terminal."),
    _f(
        "exec.container",
        "Container shell",
        "Enter the sandboxed shell plane; granted wherever core.execute is.",
    ),
    _f(
        "mcp.sidecar",
        "MCP sidecars",
        "Run command-based stdio MCP servers in a managed sidecar.",
        escalation=True,
    ),
    _f(
        "mcp.apps",
        "MCP apps",
        "Render MCP servers' ui:// templates as chat cards.",
        escalation=True,
    ),
    _f("core.logs", "Platform logs", "Read the platform log.", escalation=True),
    _f(
        "core.connectors",
        "Manage connectors",
        "Create, configure, connect and delete the project's outbound tool connectors.",
        escalation=True,
    ),
    _f(
        "exec.unconfined",
        "Unconfined shell",
        "Bypass the shell URI policy and the OS sandbox.",
        escalation=True,
    ),
    _f(
        "terminal.container",
        "Container root terminal",
        "Open a terminal rooted at / that bypasses source scoping.",
        escalation=True,
    ),
    _f(
        "terminal.supervise",
        "Supervise terminals",
        "List and control every managed terminal in the project.",
        escalation=True,
    ),
    _f("exec.host", "Host shell", "Let execute reach the operator's machine.", escalation=True),
    _f(
        "terminal.native",
        "Host terminal",
        "Open host-source terminal tabs on the operator's machine.",
        escalation=True,
    ),
    _f(
        "channels.manage",
        "Manage channels",
        "Project-scope channel connections and cross-user peer links.",
        escalation=True,
    ),
    _f(
        "core.conversation.fork",
        "Fork conversations",
        "Branch a continuable fork of a conversation.",
        escalation=True,
    ),
)

FEATURES: Mapping[str, Feature] = {f.id: f for f in _TAXONOMY}
ESCALATION_ONLY: frozenset[str] = frozenset(f.id for f in _TAXONOMY if f.escalation_only)

ADMIN_GRANTS: tuple[str, ...] = tuple(FEATURES)
_MANAGER_GRANTS: tuple[str, ...] = (
    "core.agents",
    "core.execute",
    "exec.container",
    "core.observe",
    "core.web",
    "core.prompt-polish",
    "workflow.read",
    "workflow.write",
    "workflow.dispatch",
    "channels.connect",
    "mcp.connect",
    "git.connect",
    "credentials.self",
    "terminal.read",
)
_MEMBER_GRANTS = tuple(f for f in _MANAGER_GRANTS if f != "workflow.dispatch")
_VIEWER_GRANTS: tuple[str, ...] = ("core.agents", "core.observe", "workflow.read")


@dataclass(frozen=True, kw_only=True)
class Role:
    name: str
    #: Lower is stronger.
    priority: int
    granted_features: tuple[str, ...]
    agent_access: AgentAccess

    def __post_init__(self) -> None:
        if self.priority < 0:
            raise ValueError(f"role {self.name!r}: priority must be >= 0, got {self.priority!r}")
        if self.agent_access not in ("*", "own", "view"):
            raise ValueError(
                f"role {self.name!r}: agent_access must be '*', 'own' or 'view', got {self.agent_access!r}"
            )


DEFAULT_ROLES: Mapping[str, Role] = {
    "owner": Role(name="owner", priority=0, granted_features=(WILDCARD,), agent_access="*"),
    "admin": Role(name="admin", priority=10, granted_features=ADMIN_GRANTS, agent_access="*"),
    "manager": Role(name="manager", priority=20, granted_features=_MANAGER_GRANTS, agent_access="*"),
    "member": Role(name="member", priority=30, granted_features=_MEMBER_GRANTS, agent_access="own"),
    "viewer": Role(name="viewer", priority=40, granted_features=_VIEWER_GRANTS, agent_access="view"),
}
ROLE_PRIORITIES: Mapping[str, int] = {name: r.priority for name, r in DEFAULT_ROLES.items()}


@dataclass(frozen=True, kw_only=True)
class Requires:
    """A contribution's requirement: every listed feature must be held."""

    features: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> Requires | None:
        if value is None:
            return None
        feats = value.get("features", [])
        if not isinstance(feats, list) or not all(isinstance(f, str) for f in feats):
            raise ValueError(f"requires.features must be a list of feature ids, got {feats!r}")
        return cls(features=tuple(feats))


def has_feature(session: SessionContext, feature: str) -> bool:
    """True when the session's grants include ``feature`` or the wildcard."""
    granted = session.granted_features
    if not granted:
        return False
    return WILDCARD in granted or feature in granted


def meets_requires(session: SessionContext, requires: Requires | Iterable[str] | None) -> bool:
    """True when the session holds every feature ``requires`` names (nothing required: True)."""
    if requires is None:
        return True
    needed = requires.features if isinstance(requires, Requires) else tuple(requires)
    return all(has_feature(session, f) for f in needed)
