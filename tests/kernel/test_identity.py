"""A kernel acts for the user it was started for, whatever a cell later writes into os.environ."""

from __future__ import annotations

import json

import pytest

from .harness import KernelHarness

pytestmark = pytest.mark.slow


def test_editing_the_environment_does_not_change_who_is_chatting(kernel: KernelHarness) -> None:
    kernel.script({"text": "first"}, {"text": "second"})
    kernel.run("hello")
    kernel.run("%%python\nimport os\nos.environ['NEURALIS_USER'] = 'mallory'")
    kernel.run("%conversation new")
    kernel.run("hello again")
    owners = {
        json.loads(meta.read_text())["user_id"]
        for meta in kernel.home.glob("projects/*/agents/*/conversations/*/meta.json")
    }
    assert owners == {"alice"}
    assert not list(kernel.home.glob("projects/*/agents/*/workspace/mallory"))
