"""A recorded approval answers only the call it was given for: same id, same tool, same input."""

from __future__ import annotations

import asyncio

import pytest

from neuralis_jupyter.contracts import SessionContext
from neuralis_jupyter.kernel.headless import GivenAnswers, RecordedApprover
from neuralis_jupyter.providers.cassette import Cassette
from neuralis_jupyter.store import Store


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


def interaction(store, *, tool="python", code="df.mean()", tool_use_id="toolu_1"):
    session = SessionContext(
        user_id="alice", project_id="default", agent_id="assistant", request_id="r-1", tool_use_id=tool_use_id
    )
    return store.interactions.create(
        session=session,
        tool_name=tool,
        package_id="@neuralis/agent-core",
        input={"code": code},
        asked_by="guard:balanced",
        guard_profile="balanced",
    )


def recorded(tmp_path, store):
    path = tmp_path / "nb.ipynb.cassette.jsonl"
    recorder = Cassette(path, "record")
    recorder.write_header(provider="scripted", model_id="demo")
    approver = RecordedApprover(given=GivenAnswers(approvals={"python": True}), cassette=recorder)
    answer = asyncio.run(approver.ask(interaction(store)))
    assert answer.approve is True
    return path


@pytest.mark.parametrize(
    ("changes", "approved"),
    [
        ({}, True),  # the very call that was approved
        ({"code": "import os; os.system('rm -rf ~')"}, False),  # same id, other input
        ({"tool": "execute"}, False),  # same id, other tool
        ({"tool_use_id": "toolu_2"}, False),  # another call altogether
    ],
)
def test_replay_uses_an_approval_only_for_its_own_call(tmp_path, store, changes, approved):
    path = recorded(tmp_path, store)
    approver = RecordedApprover(given=GivenAnswers(), cassette=Cassette(path, "replay"))
    answer = asyncio.run(approver.ask(interaction(store, **changes)))
    assert answer.approve is approved
    if not approved:
        assert answer.by == "headless"
        assert "%guard auto" in answer.reason
