"""Policy: the deny arms, guard profiles, PreToolUse hooks and pending interactions (issue 4).

Build one :class:`PolicyEngine` per turn and pass it as both ``policy=`` and ``permission=`` of the
:class:`~neuralis_jupyter.runtime.TurnRequest`.
"""

from .approval import (
    Approver,
    ApproverAnswer,
    DeferApprover,
    HeadlessApprover,
    InteractionResolution,
    headless_refusal,
)
from .arms import (
    ARMS,
    DEFAULT_TRUST_CEILINGS,
    PolicyArm,
    PolicyConfig,
    TrustCeiling,
    TrustOf,
    TrustTier,
    builtin_trust,
    evaluate_arms,
)
from .engine import PolicyEngine, ToolContextFactory
from .errors import (
    HookConfigError,
    InteractionAlreadyResolved,
    InteractionError,
    InteractionForbidden,
    InteractionNotFound,
    PolicyError,
    ReplayRefused,
)
from .guard import (
    DEFAULT_GUARD,
    GUARD_PROFILES,
    GuardProfile,
    GuardSource,
    LiveGuard,
    StoreGuard,
    evaluate_guard,
    guard_floor,
    is_guard_profile,
)
from .hooks import (
    HOOK_SOURCE_PRIORITY,
    HookRegistration,
    HookSource,
    HookVerdict,
    PreToolUseHooks,
    hooks_from_config,
)
from .replay import SessionSource, project_session_source

__all__ = [
    "ARMS",
    "DEFAULT_GUARD",
    "DEFAULT_TRUST_CEILINGS",
    "GUARD_PROFILES",
    "HOOK_SOURCE_PRIORITY",
    "Approver",
    "ApproverAnswer",
    "DeferApprover",
    "GuardProfile",
    "GuardSource",
    "HeadlessApprover",
    "HookConfigError",
    "HookRegistration",
    "HookSource",
    "HookVerdict",
    "InteractionAlreadyResolved",
    "InteractionError",
    "InteractionForbidden",
    "InteractionNotFound",
    "InteractionResolution",
    "LiveGuard",
    "PolicyArm",
    "PolicyConfig",
    "PolicyEngine",
    "PolicyError",
    "PreToolUseHooks",
    "ReplayRefused",
    "SessionSource",
    "StoreGuard",
    "ToolContextFactory",
    "TrustCeiling",
    "TrustOf",
    "TrustTier",
    "builtin_trust",
    "evaluate_arms",
    "evaluate_guard",
    "guard_floor",
    "headless_refusal",
    "hooks_from_config",
    "is_guard_profile",
    "project_session_source",
]
