"""The agent loop (seed 001): turns, steps, tool dispatch, result paging, sub-agent runs."""

from .context import (
    LIVE,
    SHADOW,
    ExecutionMode,
    PromptBuilder,
    StaticPrompt,
    StopSignal,
    ToolContext,
    TurnRequest,
)
from .errors import NeuralisRuntimeError, RateLimitExceeded, SpendLimitExceeded, TurnRefused
from .events import RuntimeEvent, TurnSettled, event_to_json
from .loop import AgentRuntime
from .permission import (
    DenyAll,
    PermissionDecision,
    PermissionHook,
    PermissionRequest,
    PolicyDecision,
    ToolPolicy,
)
from .tools import Tool, ToolOutput, ToolRegistry

__all__ = [
    "LIVE",
    "SHADOW",
    "AgentRuntime",
    "DenyAll",
    "ExecutionMode",
    "NeuralisRuntimeError",
    "PermissionDecision",
    "PermissionHook",
    "PermissionRequest",
    "PolicyDecision",
    "PromptBuilder",
    "RateLimitExceeded",
    "RuntimeEvent",
    "SpendLimitExceeded",
    "StaticPrompt",
    "StopSignal",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolPolicy",
    "ToolRegistry",
    "TurnRefused",
    "TurnRequest",
    "TurnSettled",
    "event_to_json",
]
