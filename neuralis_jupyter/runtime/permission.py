"""The consent seam (seed 001, item 3).

The runtime consults a :class:`PermissionHook` for every WRITE and for every read whose declared effects
require consent (any egress, code execution, destruction): :func:`needs_consent`. Plain reads never
prompt. The request carries the tool's real declared access kind, never one derived from its name or
from who may call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..contracts.envelope import effects_require_consent
from ..contracts.identity import SessionContext

if TYPE_CHECKING:
    from .tools import Tool

__all__ = [
    "DenyAll",
    "PermissionDecision",
    "PermissionHook",
    "PermissionRequest",
    "PolicyDecision",
    "ToolPolicy",
    "needs_consent",
]


@dataclass(frozen=True, kw_only=True)
class PermissionRequest:
    session: SessionContext
    tool_use_id: str
    name: str
    input: Mapping[str, Any]
    access: Literal["read", "write"]
    effects: frozenset[str]
    package_id: str
    step: int
    #: The declared tool itself, for policies that re-check its requirements on approval.
    tool: Tool | None = None

    @property
    def is_read_only(self) -> bool:
        return self.access == "read"

    @classmethod
    def of(
        cls, tool: Tool, input: Mapping[str, Any], session: SessionContext, *, step: int
    ) -> PermissionRequest:
        """The request for a call of ``tool``; ``session.tool_use_id`` names the call."""
        return cls(
            session=session,
            tool_use_id=session.tool_use_id or "",
            name=tool.name,
            input=input,
            access=tool.access,
            effects=tool.effects,
            package_id=tool.package_id,
            step=step,
            tool=tool,
        )


@dataclass(frozen=True, kw_only=True)
class PermissionDecision:
    allowed: bool
    reason: str | None = None
    #: Who decided: "user", "guard:auto", "hook:<name>", "headless", ...
    decided_by: str | None = None
    interaction_id: str | None = None


class PermissionHook(Protocol):
    async def __call__(self, request: PermissionRequest) -> PermissionDecision: ...


class DenyAll:
    """The default when nobody can be asked: consent-requiring calls are refused."""

    async def __call__(self, request: PermissionRequest) -> PermissionDecision:
        return PermissionDecision(
            allowed=False,
            reason="nobody is here to approve it; choose a guard profile that allows it",
            decided_by="default",
        )


@dataclass(frozen=True, kw_only=True)
class PolicyDecision:
    """The deny arms' answer on one call (issue 4's PolicyEngine implements :class:`ToolPolicy`)."""

    allowed: bool
    reason: str | None = None
    #: Which arm decided (blocklist, trust_ceiling, capability, allowlist, feature_gate).
    arm: str | None = None
    #: Answer with the generic "Tool not available" so a gated tool's existence does not leak.
    generic: bool = False


class ToolPolicy(Protocol):
    """Consulted on EVERY call after the envelope; may only deny (asking is the permission hook's)."""

    async def check(
        self, *, tool: Tool, input: Mapping[str, Any], session: SessionContext, step: int = 0
    ) -> PolicyDecision: ...


def needs_consent(tool: Tool) -> bool:
    """Whether a call of ``tool`` goes to the :class:`PermissionHook`: a write, or a read whose effects
    require consent. Intrinsic tools are the agent's own cognition (its todos, its paging): never."""
    return not tool.intrinsic and (tool.access == "write" or effects_require_consent(tool.effects))
