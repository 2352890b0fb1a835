"""What a turn reports while it runs. Every event has a ``type`` tag and a JSON form (``--json``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..providers.catalog import PRICING_BASIS

__all__ = [
    "BackgroundReport",
    "PermissionRequested",
    "PermissionResolved",
    "RateLimited",
    "RuntimeEvent",
    "ShadowIntent",
    "StepStarted",
    "TextDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnSettled",
    "TurnStarted",
    "TurnStatus",
    "UsageUpdated",
    "event_to_json",
]

TurnStatus = Literal["completed", "suspended", "stopped", "refused", "failed"]
HandoffFate = Literal["published", "failed", "absent"]


@dataclass(frozen=True, kw_only=True)
class TurnStarted:
    type: Literal["turn_started"] = "turn_started"
    request_id: str
    conversation_id: str
    agent_id: str | None
    model: str
    user_seq: int


@dataclass(frozen=True, kw_only=True)
class StepStarted:
    type: Literal["step_started"] = "step_started"
    step: int
    max_steps: int | None


@dataclass(frozen=True, kw_only=True)
class TextDelta:
    type: Literal["text_delta"] = "text_delta"
    text: str
    step: int


@dataclass(frozen=True, kw_only=True)
class ToolCallStarted:
    type: Literal["tool_call_started"] = "tool_call_started"
    tool_use_id: str
    name: str
    input: Mapping[str, Any]
    access: Literal["read", "write"] | None
    step: int


@dataclass(frozen=True, kw_only=True)
class PermissionRequested:
    type: Literal["permission_requested"] = "permission_requested"
    tool_use_id: str
    name: str
    input: Mapping[str, Any]
    access: Literal["read", "write"]
    effects: tuple[str, ...]
    interaction_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class PermissionResolved:
    type: Literal["permission_resolved"] = "permission_resolved"
    tool_use_id: str
    name: str
    allowed: bool
    reason: str | None = None
    decided_by: str | None = None


@dataclass(frozen=True, kw_only=True)
class ShadowIntent:
    type: Literal["shadow_intent"] = "shadow_intent"
    tool_use_id: str
    name: str
    input: Mapping[str, Any]
    access: Literal["read", "write"]


@dataclass(frozen=True, kw_only=True)
class ToolCallFinished:
    type: Literal["tool_call_finished"] = "tool_call_finished"
    tool_use_id: str
    name: str
    content: str
    is_error: bool
    outcome: str
    #: Set when the full result was offloaded and the model pages it with read_tool_result.
    full_size: int | None = None
    data: Mapping[str, Any] | None = None
    duration_ms: int = 0


@dataclass(frozen=True, kw_only=True)
class BackgroundReport:
    type: Literal["background_report"] = "background_report"
    shell_id: str
    exit_code: int | None
    text: str


@dataclass(frozen=True, kw_only=True)
class RateLimited:
    type: Literal["rate_limited"] = "rate_limited"
    wait_seconds: float
    limit_rpm: int


@dataclass(frozen=True, kw_only=True)
class UsageUpdated:
    type: Literal["usage"] = "usage"
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    steps: int
    cost_usd: float
    pricing_basis: str


@dataclass(frozen=True, kw_only=True)
class TurnSettled:
    type: Literal["turn_settled"] = "turn_settled"
    status: TurnStatus
    text: str
    steps: int
    reason: str | None = None
    #: For a suspended turn: which budget ran out and what became of the handoff checkpoint.
    budget: str | None = None
    handoff: HandoffFate | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    #: What ``cost_usd`` is: every figure derived from the catalog carries the one sentence.
    pricing_basis: str = PRICING_BASIS
    duration_ms: int = 0
    usage: tuple[UsageUpdated, ...] = field(default_factory=tuple)


RuntimeEvent = (
    TurnStarted
    | StepStarted
    | TextDelta
    | ToolCallStarted
    | PermissionRequested
    | PermissionResolved
    | ShadowIntent
    | ToolCallFinished
    | BackgroundReport
    | RateLimited
    | UsageUpdated
    | TurnSettled
)


def event_to_json(event: Any) -> dict[str, Any]:
    """The JSON form of any runtime event (a sub-agent's event nests its child's)."""
    return asdict(event)
