"""The one seam between the runtime and a model provider.

A :class:`Model` turns a :class:`ModelRequest` into an async stream of normalised events: text deltas,
complete tool_use blocks, usage reports (partial ones as they come, then one final) and one stop reason
(see :meth:`Model.stream`). Messages travel in the same block shapes the transcript stores on disk
(``{"type": "text", ...}``, ``tool_use``, ``tool_result``), so a conversation row becomes a model
message without translation; each provider module converts them to its own wire format.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Protocol, TypedDict, runtime_checkable

__all__ = [
    "Message",
    "Model",
    "ModelEvent",
    "ModelRequest",
    "StopEvent",
    "StopReason",
    "TextBlock",
    "TextDelta",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "ToolUseEvent",
    "UsageEvent",
]


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str
    is_error: bool
    name: NotRequired[str]
    outcome: NotRequired[str]


Block = TextBlock | ToolUseBlock | ToolResultBlock


class Message(TypedDict):
    """A model-facing message. Tool results travel in a ``user`` message, as Anthropic expects."""

    role: Literal["user", "assistant"]
    content: list[Block]


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """What the model sees of a tool: its name, description and JSON input schema."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """One model call. ``system`` is the byte-stable static prompt; ``system_dynamic`` changes per step."""

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    system_dynamic: str = ""
    max_tokens: int = 4096
    temperature: float | None = None


# -- events ---------------------------------------------------------------------------------------

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "other"]


@dataclass(frozen=True, kw_only=True)
class TextDelta:
    kind: Literal["text_delta"] = "text_delta"
    text: str


@dataclass(frozen=True, kw_only=True)
class ToolUseEvent:
    """A complete tool_use block; providers buffer streamed argument fragments until the block ends."""

    kind: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class UsageEvent:
    """Token counts of one model call. ``input_tokens`` excludes cache reads and writes.

    Every UsageEvent of a response holds the call's running TOTALS, never an increment: a later one
    replaces the one before, and the last one a consumer got is what the provider bills for the call.
    """

    kind: Literal["usage"] = "usage"
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: Provider-side tool calls billed per use (e.g. native web searches).
    server_tool_uses: Mapping[str, int] = field(default_factory=dict)
    #: Reported before the response ended (e.g. the input tokens, as soon as the provider counts them);
    #: the final UsageEvent supersedes it.
    partial: bool = False


@dataclass(frozen=True, kw_only=True)
class StopEvent:
    kind: Literal["stop"] = "stop"
    reason: StopReason
    #: The provider's own word for it, kept for the transcript.
    raw_reason: str | None = None


ModelEvent = TextDelta | ToolUseEvent | UsageEvent | StopEvent


@runtime_checkable
class Model(Protocol):
    """A provider model. ``provider`` and ``model_id`` key the catalog's prices."""

    @property
    def provider(self) -> str: ...

    @property
    def model_id(self) -> str: ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response. Ends with exactly one final UsageEvent (``partial=False``) and one
        StopEvent.

        Before them it may yield partial UsageEvents, as early as the provider reports usage (Anthropic:
        ``message_start``, with the input tokens). A consumer that stops reading mid-stream, or whose
        stream raises, charges the call with the last UsageEvent it received: the provider bills a
        request it started even when the response is cut short. A provider that reports usage only at
        the end (OpenAI's Chat Completions) yields no partial one, and such a call records nothing.
        """
        ...
