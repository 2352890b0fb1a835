from __future__ import annotations

import pytest

from neuralis_jupyter.store import Store


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


@pytest.fixture
def conv(store):
    return store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
