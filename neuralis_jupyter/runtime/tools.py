"""Tools as the runtime sees them: a declared contract plus a handler.

A tool's ``access`` and ``effects`` are DECLARED by its author and describe what the handler does;
nothing is inferred from the tool's name. ``intrinsic`` marks the runtime's own cognition tools
(todos, delegate, read_tool_result, wait), which the envelope's reads/writes do not bound.
``attested`` marks first-party reads built in-process, the only ones shadow mode executes.
``deterministic`` tells cassette replay whether to run the tool again or return its recorded result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from ..contracts.access import Requires
from ..contracts.envelope import ToolFacts
from ..contracts.identity import check_tool_input_schema
from ..providers.base import ToolSpec

if TYPE_CHECKING:
    from .context import ToolContext

__all__ = ["AGENT_CORE_ID", "Handler", "Tool", "ToolOutput", "ToolRegistry"]

#: The builtin first-party package: the runtime's own tools and the kernel's notebook tools.
AGENT_CORE_ID = "@neuralis/agent-core"

Outcome = Literal["ok", "error", "denied", "refused", "shadow_denied", "stopped", "unavailable", "invalid"]


@dataclass(frozen=True, kw_only=True)
class ToolOutput:
    """What a handler returns. ``content`` is the text the model reads."""

    content: str
    is_error: bool = False
    outcome: Outcome = "ok"
    #: Structured data for cards and frames; never serialised to the model.
    data: Mapping[str, Any] | None = None


Handler = Callable[[dict[str, Any], "ToolContext"], Awaitable[ToolOutput | str]]


@dataclass(frozen=True, kw_only=True)
class Tool:
    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Handler
    access: Literal["read", "write"]
    effects: frozenset[str] = frozenset()
    intrinsic: bool = False
    attested: bool = False
    deterministic: bool = True
    #: The package that contributed the tool: the policy's trust ceiling and the guard judge it by its
    #: tier. Required, so that no tool is first-party by omission; the runtime's own say
    #: :data:`AGENT_CORE_ID`.
    package_id: str
    requires: Requires | None = None
    #: Never handed to a sub-agent (e.g. ask_question: a child has nobody to ask).
    barred_from_subagents: bool = False

    def __post_init__(self) -> None:
        if self.access not in ("read", "write"):
            raise ValueError(f"tool {self.name!r}: access must be 'read' or 'write', got {self.access!r}")
        check_tool_input_schema(self.name, self.input_schema)

    @property
    def facts(self) -> ToolFacts:
        return ToolFacts(name=self.name, access=self.access, intrinsic=self.intrinsic, effects=self.effects)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, input_schema=self.input_schema)


@dataclass(frozen=True)
class ToolRegistry:
    """An immutable set of tools by name. Narrowing returns a new registry."""

    _tools: Mapping[str, Tool] = field(default_factory=dict)

    @classmethod
    def of(cls, tools: Iterable[Tool]) -> ToolRegistry:
        by_name: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in by_name:
                raise ValueError(f"two tools are named {tool.name!r}; tool names must be unique")
            by_name[tool.name] = tool
        return cls(by_name)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec for t in self._tools.values())

    def filter(self, keep: Callable[[Tool], bool]) -> ToolRegistry:
        return ToolRegistry({n: t for n, t in self._tools.items() if keep(t)})

    def merge(self, other: Iterable[Tool]) -> ToolRegistry:
        return ToolRegistry.of([*self._tools.values(), *other])

    def with_intrinsic(self, tools: Iterable[Tool]) -> ToolRegistry:
        """Merge the runtime's own cognition tools, marked intrinsic. (A first-party package's tools
        arrive already marked; the loader refuses ``intrinsic`` from any other package.)"""
        return self.merge(replace(t, intrinsic=True) for t in tools)
