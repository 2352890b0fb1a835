"""Guard profiles: when a call that MAY run should still be shown to a person first (seed 000).

The guard decides only allow-versus-ASK. Its floors are PROMPT floors, a matter of UX, not security:
the real denials are the policy arms (blocklist, trust ceiling, capability, allowlist, feature gate),
which run before the guard on every call and clamp even ``auto`` to what the caller may do.

=========  =============================================================================================
profile    asks for
=========  =============================================================================================
auto       nothing: zero prompts (a mid-turn flip to auto removes every later prompt)
balanced   (1) egress (effect ``egress`` or any ``egress:*``), (2) code execution (effect ``exec``),
           (3) destructive effects (effect ``destructive``), (4) any write by a non-first-party package
safe       the balanced floors, plus (5) every other write
=========  =============================================================================================

The profile is read LIVE at every decision through a :class:`GuardSource`: :class:`LiveGuard` is an
in-memory holder the kernel's ``%guard`` sets; :class:`StoreGuard` reads a per-conversation override row
(set by a server route) off the event loop and falls back to another source when no row is set.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal, Protocol, TypeGuard

from ..contracts.envelope import EGRESS, effect_kinds
from ..runtime.permission import PermissionRequest
from ..store.interactions import GuardOverrideStore
from ..store.projects import GuardProfile

__all__ = [
    "DEFAULT_GUARD",
    "DESTRUCTIVE",
    "EXEC",
    "GUARD_PROFILES",
    "GuardFloor",
    "GuardProfile",
    "GuardSource",
    "LiveGuard",
    "StoreGuard",
    "evaluate_guard",
    "guard_floor",
    "is_guard_profile",
]

log = logging.getLogger(__name__)

GUARD_PROFILES: tuple[GuardProfile, ...] = ("safe", "balanced", "auto")
DEFAULT_GUARD: GuardProfile = "balanced"
#: The declared effect of a tool that executes code.
EXEC = "exec"
#: The declared effect of a tool whose change cannot be undone (delete, overwrite, drop).
DESTRUCTIVE = "destructive"
GuardFloor = Literal["egress", "exec", "destructive", "package_write", "write"]


def is_guard_profile(value: object) -> TypeGuard[GuardProfile]:
    return isinstance(value, str) and value in GUARD_PROFILES


def guard_floor(profile: GuardProfile, request: PermissionRequest, *, trust: str) -> GuardFloor | None:
    """The first prompt floor ``request`` hits under ``profile``, or ``None`` when it may just run.

    ``trust`` is the tier of the package that contributed the tool (``first-party`` | ``trusted`` |
    ``untrusted``).
    """
    if not is_guard_profile(profile):
        raise ValueError(f"guard profile must be one of {GUARD_PROFILES}, got {profile!r}")
    if profile == "auto":
        return None
    effects = effect_kinds(request.effects)
    if EGRESS in effects:
        return "egress"
    if EXEC in effects:
        return "exec"
    if DESTRUCTIVE in effects:
        return "destructive"
    if request.access == "write" and trust != "first-party":
        return "package_write"
    if request.access == "write" and profile == "safe":
        return "write"
    return None


def evaluate_guard(
    profile: GuardProfile, request: PermissionRequest, *, trust: str
) -> Literal["allow", "ask"]:
    """``"ask"`` when a prompt floor applies under ``profile``, else ``"allow"``."""
    return "ask" if guard_floor(profile, request, trust=trust) is not None else "allow"


class GuardSource(Protocol):
    """Where the active profile is read, at every tool decision."""

    async def current(self) -> GuardProfile: ...


class LiveGuard:
    """An in-memory guard holder: ``set`` takes effect at the next tool decision."""

    def __init__(self, profile: GuardProfile = DEFAULT_GUARD) -> None:
        self.set(profile)

    def set(self, profile: GuardProfile) -> None:
        if not is_guard_profile(profile):
            raise ValueError(f"guard profile must be one of {GUARD_PROFILES}, got {profile!r}")
        self._profile: GuardProfile = profile

    @property
    def profile(self) -> GuardProfile:
        return self._profile

    async def current(self) -> GuardProfile:
        return self._profile


class StoreGuard:
    """The override row of one conversation when set, else ``fallback``.

    The row is read in a worker thread with a timeout; a read that fails or times out answers
    ``"safe"`` (more prompts, never fewer) and is logged.
    """

    def __init__(
        self,
        overrides: GuardOverrideStore,
        *,
        project_id: str,
        conversation_id: str,
        fallback: GuardSource | GuardProfile = DEFAULT_GUARD,
        timeout: float = 5.0,
    ) -> None:
        self.overrides = overrides
        self.project_id = project_id
        self.conversation_id = conversation_id
        self.fallback: GuardSource = LiveGuard(fallback) if isinstance(fallback, str) else fallback
        self.timeout = timeout

    async def current(self) -> GuardProfile:
        try:
            value = await asyncio.wait_for(
                asyncio.to_thread(self.overrides.get, self.project_id, self.conversation_id), self.timeout
            )
        except Exception:
            log.exception("could not read the guard override of %s; using 'safe'", self.conversation_id)
            return "safe"
        return value if value is not None else await self.fallback.current()
