"""Fixtures for the package tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def forget_modules() -> Iterator[list[str]]:
    """Module names appended here are dropped from sys.modules after the test."""
    names: list[str] = []
    yield names
    for name in names:
        sys.modules.pop(name, None)
