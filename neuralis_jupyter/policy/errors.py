"""Policy errors. A route maps ``code`` to HTTP in one place; the CLI prints the message.

    PolicyError
    ├── HookConfigError              a declarative hook entry is malformed (developer/admin error)
    └── InteractionError
        ├── InteractionNotFound      no such interaction, or not in the caller's project (404)
        ├── InteractionForbidden     the caller may not resolve this interaction (403)
        ├── InteractionAlreadyResolved  it is no longer pending (409)
        └── ReplayRefused            an approved interaction may not run (409): see ``check``

A deny decision on a tool call is not an exception: it is a ``PolicyDecision`` or a
``PermissionDecision`` with ``allowed=False``.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "HookConfigError",
    "InteractionAlreadyResolved",
    "InteractionError",
    "InteractionForbidden",
    "InteractionNotFound",
    "PolicyError",
    "ReplayCheck",
    "ReplayRefused",
]

#: Which replay check refused: the status, the stored input's hash, the tool lookup, the policy arms.
ReplayCheck = Literal["status", "tool", "input_hash", "input", "session", "policy"]


class PolicyError(Exception):
    code = "policy_error"


class HookConfigError(PolicyError, ValueError):
    code = "hook_config_invalid"

    def __init__(self, index: int, problem: str) -> None:
        self.index = index
        self.problem = problem
        super().__init__(f"hook entry #{index}: {problem}; fix the hooks list in the project settings")

    def __reduce__(self) -> tuple[type, tuple[int, str]]:
        return (type(self), (self.index, self.problem))


class InteractionError(PolicyError):
    code = "interaction_error"

    def __init__(self, interaction_id: str, message: str) -> None:
        self.interaction_id = interaction_id
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.interaction_id, str(self)))


class InteractionNotFound(InteractionError, LookupError):
    code = "interaction_not_found"


class InteractionForbidden(InteractionError, PermissionError):
    code = "interaction_forbidden"


class InteractionAlreadyResolved(InteractionError):
    code = "interaction_resolved"


class ReplayRefused(InteractionError):
    code = "replay_refused"

    def __init__(
        self, interaction_id: str, message: str, *, check: ReplayCheck, arm: str | None = None
    ) -> None:
        super().__init__(interaction_id, message)
        self.check = check
        self.arm = arm
