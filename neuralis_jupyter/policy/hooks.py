"""PreToolUse hooks: admin, project, user and package code that may allow, deny or ask for a call.

Hooks are evaluated in source priority, strongest first: admin/managed > project/host > user/skill >
package (:data:`HOOK_SOURCE_PRIORITY`); within one priority, in registration order. The FIRST hook whose
matcher (a glob over the tool name) matches and that returns a decision decides; ``None`` means no
opinion and the next hook is asked. So an admin ``allow`` beats a package ``deny``, and a user ``deny``
beats a package ``allow``.

A hook is a callable of the :class:`~neuralis_jupyter.runtime.permission.PermissionRequest`, sync or
async (a sync hook must not block: do I/O in an async one). It returns ``"allow"``, ``"deny"``,
``"ask"``, a :class:`HookVerdict` (a decision with a reason) or ``None``. A hook that raises, times out
or returns anything else DENIES the call (fail closed), with a reason naming the hook.

Declarative hooks come from configuration as ``{source, match, decision, reason}`` entries
(:func:`hooks_from_config`).
"""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict, get_args

from ..runtime.permission import PermissionRequest
from .errors import HookConfigError

__all__ = [
    "HOOK_SOURCE_PRIORITY",
    "HookConfigEntry",
    "HookDecision",
    "HookOutcome",
    "HookRegistration",
    "HookSource",
    "HookVerdict",
    "PreToolUseHooks",
    "hooks_from_config",
]

log = logging.getLogger(__name__)

HookSource = Literal["admin", "managed", "project", "host", "user", "skill", "package"]
HookDecision = Literal["allow", "deny", "ask"]
#: Lower runs first. Sources sharing a number share a tier and keep their registration order.
HOOK_SOURCE_PRIORITY: Mapping[HookSource, int] = {
    "admin": 0,
    "managed": 0,
    "project": 1,
    "host": 1,
    "user": 2,
    "skill": 2,
    "package": 3,
}
_DECISIONS: frozenset[str] = frozenset(get_args(HookDecision))


@dataclass(frozen=True, kw_only=True)
class HookVerdict:
    decision: HookDecision
    reason: str | None = None


HookResult = HookVerdict | HookDecision | None
HookCallable = Callable[[PermissionRequest], HookResult | Awaitable[HookResult]]


@dataclass(frozen=True, kw_only=True)
class HookRegistration:
    source: HookSource
    name: str
    #: A glob over the tool name (``"*"``, ``"web_*"``, ``"write_note"``).
    matcher: str
    callable: HookCallable

    def __post_init__(self) -> None:
        if self.source not in HOOK_SOURCE_PRIORITY:
            raise ValueError(f"hook {self.name!r}: source must be one of {list(HOOK_SOURCE_PRIORITY)}")
        if not self.name:
            raise ValueError("a hook needs a name: it is what a denial and the audit trail cite")

    def matches(self, tool_name: str) -> bool:
        return fnmatch.fnmatchcase(tool_name, self.matcher)


@dataclass(frozen=True, kw_only=True)
class HookOutcome:
    """The deciding hook's answer."""

    decision: HookDecision
    reason: str | None
    hook: str
    source: HookSource


class PreToolUseHooks:
    """An ordered set of hook registrations; :meth:`evaluate` finds the deciding one."""

    def __init__(self, registrations: Iterable[HookRegistration] = (), *, timeout: float = 10.0) -> None:
        self._hooks: list[HookRegistration] = []
        self.timeout = timeout
        for registration in registrations:
            self.register(registration)

    def register(self, registration: HookRegistration) -> None:
        self._hooks.append(registration)
        # sorted() is stable: registration order survives within one priority tier.
        self._hooks = sorted(self._hooks, key=lambda h: HOOK_SOURCE_PRIORITY[h.source])

    @property
    def ordered(self) -> tuple[HookRegistration, ...]:
        return tuple(self._hooks)

    async def evaluate(self, request: PermissionRequest) -> HookOutcome | None:
        """The first decision of a matching hook, in priority order; ``None`` when none has one."""
        for hook in self._hooks:
            if not hook.matches(request.name):
                continue
            try:
                verdict = _as_verdict(await asyncio.wait_for(_call(hook, request), self.timeout))
            except Exception as exc:
                log.exception("PreToolUse hook %r (%s) failed on %s", hook.name, hook.source, request.name)
                return HookOutcome(
                    decision="deny",
                    reason=f"hook {hook.name!r} ({hook.source}) failed ({type(exc).__name__}), so the call "
                    "is refused until the hook is fixed",
                    hook=hook.name,
                    source=hook.source,
                )
            if verdict is not None:
                return HookOutcome(
                    decision=verdict.decision, reason=verdict.reason, hook=hook.name, source=hook.source
                )
        return None


async def _call(hook: HookRegistration, request: PermissionRequest) -> Any:
    result = hook.callable(request)
    if inspect.isawaitable(result):
        result = await result
    return result


def _as_verdict(result: Any) -> HookVerdict | None:
    if result is None or isinstance(result, HookVerdict):
        return result
    if isinstance(result, str) and result in _DECISIONS:
        return HookVerdict(decision=result)  # type: ignore[arg-type]
    raise TypeError(f"a hook must return 'allow', 'deny', 'ask', a HookVerdict or None, got {result!r}")


class HookConfigEntry(TypedDict):
    """One declarative hook as written in project.json or the settings."""

    source: HookSource
    match: NotRequired[str]
    decision: HookDecision
    reason: NotRequired[str]
    name: NotRequired[str]


def hooks_from_config(entries: Iterable[Mapping[str, Any]]) -> list[HookRegistration]:
    """Registrations for declarative hooks; a malformed entry raises :class:`HookConfigError`."""
    hooks: list[HookRegistration] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise HookConfigError(index, f"expected an object, got {type(entry).__name__}")
        unknown = set(entry) - set(HookConfigEntry.__annotations__)
        if unknown:
            raise HookConfigError(index, f"unknown key(s) {sorted(unknown)}")
        source, decision = entry.get("source"), entry.get("decision")
        match, reason = entry.get("match", "*"), entry.get("reason")
        if source not in HOOK_SOURCE_PRIORITY:
            raise HookConfigError(
                index, f"source must be one of {list(HOOK_SOURCE_PRIORITY)}, got {source!r}"
            )
        if decision not in _DECISIONS:
            raise HookConfigError(index, f"decision must be allow, deny or ask, got {decision!r}")
        if not isinstance(match, str) or not match:
            raise HookConfigError(index, f"match must be a tool-name glob, got {match!r}")
        if reason is not None and not isinstance(reason, str):
            raise HookConfigError(index, f"reason must be text, got {reason!r}")
        name = entry.get("name") or f"{source}:{decision}:{match}"
        verdict = HookVerdict(decision=decision, reason=reason)
        hooks.append(
            HookRegistration(source=source, name=str(name), matcher=match, callable=lambda _r, v=verdict: v)
        )
    return hooks
