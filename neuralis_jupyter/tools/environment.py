"""What the native tools need from their host, handed to them once when their handlers are built.

A tool module exposes ``handlers(env: ToolEnvironment) -> dict[str, Handler]``; the host binds them to
the builtin agent-core package (:func:`neuralis_jupyter.tools.native_handlers`). Each tool family keeps
its settings in its own traitlets ``Configurable`` (``c.ExecuteSettings.timeout = 60``), built from
``env.config`` so one Jupyter config file sets them all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from traitlets.config import Config

if TYPE_CHECKING:
    from ..config import NeuralisSettings
    from ..packages import PackageSet
    from ..store import Store


class Answerer(Protocol):
    """Who answers ``ask_question``: a widget in the kernel, a route on the server; none headless."""

    async def ask(
        self, *, question: str, options: list[dict[str, Any]], multiple: bool, tool_use_id: str
    ) -> list[str] | None:
        """The chosen option ids (or free text as a one-element list); ``None`` when nobody answered."""
        ...


@dataclass(kw_only=True)
class ToolEnvironment:
    settings: NeuralisSettings
    store: Store
    packages: PackageSet
    #: The Jupyter config the tool families read their own settings from.
    config: Config = field(default_factory=Config)
    #: The base URL of this host's REST API when a server runs (NEURALIS_API_URL for shells).
    api_url: str | None = None
    #: Who answers ask_question; ``None`` in a headless run.
    answerer: Answerer | None = None
    #: Host services shared by tools, by name (e.g. "shells" for the background shell manager).
    services: dict[str, Any] = field(default_factory=dict)


#: The answerer of the turn running in this context: set by ``Workbench.turn(answerer=...)`` so that two
#: turns running at once (a kernel's subshells) each ask their own cell. "unset": ``env.answerer``.
_TURN_ANSWERER: ContextVar[Answerer | Literal["unset"] | None] = ContextVar("turn_answerer", default="unset")


def turn_answerer(env: ToolEnvironment) -> Answerer | None:
    """Who answers a question asked in the current turn (``None``: nobody, a headless run)."""
    answerer = _TURN_ANSWERER.get()
    return env.answerer if answerer == "unset" else answerer


@contextlib.contextmanager
def answering(answerer: Answerer | None) -> Iterator[None]:
    """Within the block (and the tasks it starts), questions go to ``answerer``."""
    token = _TURN_ANSWERER.set(answerer)
    try:
        yield
    finally:
        _TURN_ANSWERER.reset(token)
