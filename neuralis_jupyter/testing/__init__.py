"""Test doubles Neuralis ships: the scripted model and the loopback fake LLM server.

Importing this package imports neither pytest nor a provider SDK; the pytest fixtures live in
:mod:`neuralis_jupyter.testing.fixtures`.
"""

from __future__ import annotations

import asyncio

from ..providers.base import Model, ModelEvent, ModelRequest
from ..providers.scripted import Call, Reply, ScriptedModel, ScriptExhausted
from .fake_llm import Entry, Fail, FakeLLMServer, Raw, RecordedRequest, load_script

__all__ = [
    "Call",
    "Entry",
    "Fail",
    "FakeLLMServer",
    "Raw",
    "RecordedRequest",
    "Reply",
    "ScriptExhausted",
    "ScriptedModel",
    "collect_events",
    "load_script",
]


def collect_events(model: Model, request: ModelRequest) -> list[ModelEvent]:
    """Every event of one ``model.stream(request)``, for synchronous tests (runs its own event loop)."""

    async def collect() -> list[ModelEvent]:
        return [event async for event in model.stream(request)]

    return asyncio.run(collect())
