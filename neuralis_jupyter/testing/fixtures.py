"""Pytest fixtures over the shipped test doubles; ``tests/conftest.py`` imports them.

This module imports pytest; :mod:`neuralis_jupyter.testing` itself does not.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_llm import FakeLLMServer

__all__ = ["fake_llm"]


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    """A running fake LLM server; the test fails if any request found no scripted answer.

    Unused script entries are not checked here (call ``fake_llm.assert_complete()`` for that): a test
    that stops a turn early may leave some on purpose.
    """
    with FakeLLMServer() as server:
        yield server
    if server.errors:
        pytest.fail(
            "the fake LLM server saw unexpected requests:\n  " + "\n  ".join(server.errors), pytrace=False
        )
