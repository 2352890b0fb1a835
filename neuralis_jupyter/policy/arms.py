"""The policy's deny arms: pure decisions over a tool, a session and the configuration.

They run on EVERY call after the envelope, in this order, and the first that denies decides:

1. ``blocklist``      the tool's name matches a configured glob (intrinsic tools included);
2. ``trust_ceiling``  the tool's package tier may not declare such a tool (:data:`DEFAULT_TRUST_CEILINGS`);
3. ``capability``     the tool's DECLARED access/effects need a feature the session lacks: a write needs
                      ``core.execute``; an ``exec`` effect needs ``exec.container`` or ``exec.unconfined``;
                      an ``egress:*`` effect needs ``core.web``;
4. ``allowlist``      when configured, only matching tools run (intrinsic cognition tools are exempt, as
                      the envelope exempts them from its reads/writes);
5. ``feature_gate``   the tool's ``requires.features`` (:func:`meets_requires`); answered generically
                      (``Tool not available: <name>``) so a gated tool's existence does not leak.

A PreToolUse hook's deny comes right after them, on every call too; the guard profile and the hooks'
allow or ask come later, for writes and consent reads only, and decide allow-versus-ask.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..contracts.access import has_feature, meets_requires
from ..contracts.envelope import EGRESS, effect_kinds
from ..contracts.identity import SessionContext
from ..runtime.permission import PolicyDecision
from ..runtime.tools import AGENT_CORE_ID, Tool
from .guard import EXEC

__all__ = [
    "ARMS",
    "DEFAULT_TRUST_CEILINGS",
    "PolicyArm",
    "PolicyConfig",
    "TrustCeiling",
    "TrustOf",
    "TrustTier",
    "builtin_trust",
    "evaluate_arms",
]

TrustTier = Literal["first-party", "trusted", "untrusted"]
TRUST_TIERS: tuple[TrustTier, ...] = ("first-party", "trusted", "untrusted")
#: A package id's trust tier (the package loader's answer; the policy never reads manifests itself).
TrustOf = Callable[[str], TrustTier]
PolicyArm = Literal["blocklist", "trust_ceiling", "capability", "allowlist", "feature_gate"]
ALLOWED = PolicyDecision(allowed=True)


@dataclass(frozen=True, kw_only=True)
class TrustCeiling:
    """What a package of one trust tier may DECLARE, whoever calls it."""

    may_write: bool
    #: Effects its tools may not declare.
    forbidden_effects: frozenset[str]
    #: Of those, the ones a tool on :attr:`PolicyConfig.ceiling_allowlist` may declare anyway.
    allowlistable: frozenset[str] = frozenset()


#: first-party: anything. trusted: anything but code execution, unless the tool is allowlisted.
#: untrusted: read-only tools without exec, egress or destructive effects; no allowlist lifts that.
DEFAULT_TRUST_CEILINGS: Mapping[TrustTier, TrustCeiling] = {
    "first-party": TrustCeiling(may_write=True, forbidden_effects=frozenset()),
    "trusted": TrustCeiling(
        may_write=True, forbidden_effects=frozenset({EXEC}), allowlistable=frozenset({EXEC})
    ),
    "untrusted": TrustCeiling(may_write=False, forbidden_effects=frozenset({EXEC, EGRESS, "destructive"})),
}


def builtin_trust(package_id: str) -> TrustTier:
    """The default :data:`TrustOf`: only the builtin agent-core package is first-party."""
    return "first-party" if package_id in ("agent-core", AGENT_CORE_ID) else "untrusted"


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    #: Tool-name globs that never run.
    blocklist: tuple[str, ...] = ()
    #: When set, only tools matching one of these globs run (intrinsic tools are exempt).
    allowlist: tuple[str, ...] | None = None
    #: ``"<package_id>/<tool glob>"`` entries allowed past an allowlistable trust-ceiling effect.
    ceiling_allowlist: tuple[str, ...] = ()
    trust_ceilings: Mapping[TrustTier, TrustCeiling] = field(default_factory=lambda: DEFAULT_TRUST_CEILINGS)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> PolicyConfig:
        """``{"blocklist": [...], "allowlist": [...] | null, "ceiling_allowlist": [...]}``."""
        doc = doc or {}
        unknown = set(doc) - {"blocklist", "allowlist", "ceiling_allowlist"}
        if unknown:
            raise ValueError(f"policy settings have unknown key(s) {sorted(unknown)}")

        def globs(key: str) -> tuple[str, ...]:
            value = doc.get(key) or []
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"policy {key} must be a list of tool-name globs, got {value!r}")
            return tuple(value)

        allow = None if doc.get("allowlist") is None else globs("allowlist")
        return cls(
            blocklist=globs("blocklist"), allowlist=allow, ceiling_allowlist=globs("ceiling_allowlist")
        )


def _any(name: str, globs: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def _blocklist(tool: Tool, session: SessionContext, config: PolicyConfig, trust: TrustTier) -> str | None:
    return "it is on the project's blocklist" if _any(tool.name, config.blocklist) else None


def _trust_ceiling(tool: Tool, session: SessionContext, config: PolicyConfig, trust: TrustTier) -> str | None:
    ceiling = config.trust_ceilings.get(trust)
    if ceiling is None:
        return f"package {tool.package_id!r} has no trust ceiling for tier {trust!r}"
    if tool.access == "write" and not ceiling.may_write:
        return f"package {tool.package_id!r} is {trust} and may not declare write tools"
    over = effect_kinds(tool.effects) & ceiling.forbidden_effects
    if over and _any(f"{tool.package_id}/{tool.name}", config.ceiling_allowlist):
        over -= ceiling.allowlistable
    if over:
        return f"package {tool.package_id!r} is {trust} and may not declare {', '.join(sorted(over))} tools"
    return None


def _capability(tool: Tool, session: SessionContext, config: PolicyConfig, trust: TrustTier) -> str | None:
    kinds = effect_kinds(tool.effects)
    if tool.access == "write" and not has_feature(session, "core.execute"):
        return "it writes, and your role lacks core.execute"
    if EXEC in kinds and not (
        has_feature(session, "exec.container") or has_feature(session, "exec.unconfined")
    ):
        return "it executes code, and your role lacks exec.container"
    if EGRESS in kinds and not has_feature(session, "core.web"):
        return "it reaches outside the platform, and your role lacks core.web"
    return None


def _allowlist(tool: Tool, session: SessionContext, config: PolicyConfig, trust: TrustTier) -> str | None:
    if config.allowlist is None or tool.intrinsic or _any(tool.name, config.allowlist):
        return None
    return "it is not on the project's allowlist"


def _feature_gate(tool: Tool, session: SessionContext, config: PolicyConfig, trust: TrustTier) -> str | None:
    return None if meets_requires(session, tool.requires) else f"Tool not available: {tool.name}"


Arm = Callable[[Tool, SessionContext, PolicyConfig, TrustTier], str | None]
ARMS: tuple[tuple[PolicyArm, Arm], ...] = (
    ("blocklist", _blocklist),
    ("trust_ceiling", _trust_ceiling),
    ("capability", _capability),
    ("allowlist", _allowlist),
    ("feature_gate", _feature_gate),
)


def evaluate_arms(
    tool: Tool, session: SessionContext, *, config: PolicyConfig, trust: TrustTier
) -> PolicyDecision:
    """The first arm that denies (with its name), or an allow when every arm passes."""
    for arm, deny in ARMS:
        reason = deny(tool, session, config, trust)
        if reason is not None:
            return PolicyDecision(allowed=False, reason=reason, arm=arm, generic=arm == "feature_gate")
    return ALLOWED
