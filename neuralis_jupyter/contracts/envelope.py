"""The run envelope: what a turn may read, write and spend (seed 001, checklist items 1-5).

The loop consumes :func:`authorize_tool_invocation`'s answer verbatim and never re-derives scope.
Reads check ``scope.reads`` (``"all"`` is the executor posture), writes check ``scope.writes``, and
``forbidden`` beats both. Intrinsic cognition tools (todos, delegate, read_tool_result, wait) skip the
reads/writes check but stay refusable through ``forbidden``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ALL",
    "CONSENT_EFFECTS",
    "EGRESS",
    "EGRESS_EXTERNAL",
    "Authorization",
    "BudgetKind",
    "BudgetUse",
    "Budgets",
    "Envelope",
    "Scope",
    "ToolFacts",
    "authorize_tool_invocation",
    "budget_exhausted",
    "effect_kind",
    "effect_kinds",
    "effects_require_consent",
]

ALL: Literal["all"] = "all"
#: The kind of every effect that sends data out: ``egress`` itself and every ``egress:<where>`` spelling.
EGRESS = "egress"
#: The declared effect of a tool that sends data outside the platform (exfiltration-shaped).
EGRESS_EXTERNAL = "egress:external"
Access = Literal["read", "write"]
BudgetKind = Literal["max_steps", "max_tokens", "max_usd"]


@dataclass(frozen=True, kw_only=True)
class Scope:
    reads: Literal["all"] | frozenset[str] = ALL
    writes: Literal["all"] | frozenset[str] = ALL
    forbidden: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        *,
        reads: Literal["all"] | Iterable[str] = ALL,
        writes: Literal["all"] | Iterable[str] = ALL,
        forbidden: Iterable[str] = (),
    ) -> Scope:
        return cls(
            reads=ALL if reads == ALL else frozenset(reads),
            writes=ALL if writes == ALL else frozenset(writes),
            forbidden=frozenset(forbidden),
        )


@dataclass(frozen=True, kw_only=True)
class Budgets:
    """Per-run ceilings; ``None`` means unbounded."""

    max_steps: int | None = None
    max_tokens: int | None = None
    max_usd: float | None = None


@dataclass(frozen=True, kw_only=True)
class Envelope:
    scope: Scope = field(default_factory=Scope)
    budgets: Budgets = field(default_factory=Budgets)


@dataclass(frozen=True, kw_only=True)
class ToolFacts:
    """What the envelope needs to know of a tool: its DECLARED access, never a guess from its name."""

    name: str
    access: Access
    intrinsic: bool = False
    effects: frozenset[str] = frozenset()


@dataclass(frozen=True, kw_only=True)
class Authorization:
    allowed: bool
    #: Why a call was refused, in words the model can act on; ``None`` when allowed.
    reason: str | None = None
    code: Literal["ok", "forbidden", "outside_reads", "outside_writes"] = "ok"


_OK = Authorization(allowed=True)


def authorize_tool_invocation(tool: ToolFacts, envelope: Envelope) -> Authorization:
    scope = envelope.scope
    if tool.name in scope.forbidden:
        return Authorization(allowed=False, code="forbidden", reason="it is forbidden in this run")
    if tool.intrinsic:
        return _OK
    if tool.access == "read":
        if scope.reads == ALL or tool.name in scope.reads:
            return _OK
        return Authorization(
            allowed=False, code="outside_reads", reason="it is not among the reads this run may make"
        )
    if scope.writes == ALL or tool.name in scope.writes:
        return _OK
    return Authorization(
        allowed=False, code="outside_writes", reason="it is not among the writes this run may make"
    )


def effect_kind(effect: str) -> str:
    """The kind the policy judges a declared effect by: trimmed and lower-cased, with every egress
    spelling (``egress``, ``egress:external``, ``egress:internet``, ...) folded to :data:`EGRESS`.

    The one fold behind consent, the guard's floors and the deny arms, so no spelling slips past one.
    """
    kind = effect.strip().lower()
    return EGRESS if kind == EGRESS or kind.startswith(EGRESS + ":") else kind


def effect_kinds(effects: Iterable[str]) -> frozenset[str]:
    return frozenset(map(effect_kind, effects))


#: Effect kinds that make even a declared read a consent question: it sends data out, runs code or
#: destroys.
CONSENT_EFFECTS: frozenset[str] = frozenset({EGRESS, "exec", "destructive"})


def effects_require_consent(effects: Iterable[str]) -> bool:
    """True for effects that need the user's consent even on a read (any egress, exec, destruction)."""
    return not CONSENT_EFFECTS.isdisjoint(effect_kinds(effects))


@dataclass(frozen=True, kw_only=True)
class BudgetUse:
    steps: int = 0
    tokens: int = 0
    usd: float = 0.0


def budget_exhausted(budgets: Budgets, used: BudgetUse) -> BudgetKind | None:
    """The first budget ``used`` has reached, or ``None`` while every one has room."""
    if budgets.max_steps is not None and used.steps >= budgets.max_steps:
        return "max_steps"
    if budgets.max_tokens is not None and used.tokens >= budgets.max_tokens:
        return "max_tokens"
    if budgets.max_usd is not None and used.usd >= budgets.max_usd:
        return "max_usd"
    return None
