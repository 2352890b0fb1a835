"""The line magics in a real kernel: each switch takes effect, and a refused one changes nothing.

A refused ``%agent``, ``%model`` or ``%conversation`` must leave the kernel talking where it did: the
next chat cell still answers.
"""

from __future__ import annotations

import pytest

from neuralis_jupyter.store import Store
from neuralis_jupyter.store.projects import DEFAULT_PROJECT_ID

from .harness import Execution, KernelHarness

pytestmark = pytest.mark.slow


def shown(kernel: KernelHarness, code: str) -> str:
    """What a magic returned (its execute_result, without the repr quotes)."""
    (result,) = kernel.run(code).of_type("execute_result")
    return result["content"]["data"]["text/plain"].strip("'\"")


def refused(kernel: KernelHarness, code: str) -> Execution:
    execution = kernel.finish(kernel.start(code))
    assert execution.status == "error", f"{code!r} was accepted"
    return execution


def still_chats(kernel: KernelHarness) -> None:
    kernel.script({"text": "Still here."})
    assert "Still here." in kernel.run("Are you there?").markdown()


def test_agent_switches_to_a_created_agent_and_back(kernel: KernelHarness) -> None:
    default = shown(kernel, "%agent").removeprefix("agent: ")  # provisions the project's default agent
    store = Store.open(kernel.home)
    research = store.agents.create(store.projects.session_for("alice", DEFAULT_PROJECT_ID), name="Research")

    assert shown(kernel, f"%agent {research.id}") == f"agent: {research.id}"
    kernel.script({"text": "Research speaking."})
    assert "Research speaking." in kernel.run("Who is this?").markdown()
    conversation = kernel.conversation()
    assert shown(kernel, "%conversation") == f"conversation: {conversation} (agent {research.id})"
    assert list(
        kernel.home.glob(f"projects/*/agents/{research.id}/conversations/{conversation}/messages.jsonl")
    )

    assert shown(kernel, f"%agent {default}") == f"agent: {default}"
    assert kernel.conversation() != conversation, "another agent, another conversation"
    assert shown(kernel, "%conversation").endswith(f"(agent {default})")


def test_an_unknown_agent_leaves_the_kernel_where_it_was(kernel: KernelHarness) -> None:
    agent = shown(kernel, "%agent")
    conversation = kernel.conversation()

    error = refused(kernel, "%agent nosuch")

    assert "nosuch" in error.reply["content"]["evalue"]
    assert shown(kernel, "%agent") == agent
    assert kernel.conversation() == conversation
    still_chats(kernel)


def test_model_refuses_a_bad_reference_and_takes_a_good_one(kernel: KernelHarness) -> None:
    before = shown(kernel, "%model")
    try:
        for bad, says in (
            ("gpt4", "PROVIDER:MODEL"),
            ("anthropic:no-such-model", "known anthropic models"),
            ("nosuch:model", "the providers are"),
        ):
            error = refused(kernel, f"%model {bad}")
            assert says in error.reply["content"]["evalue"]
            assert shown(kernel, "%model") == before, f"%model {bad} changed the model"

        assert shown(kernel, "%model anthropic:claude-sonnet-4-6") == "model: anthropic:claude-sonnet-4-6"
        assert shown(kernel, "%model") == "model: anthropic:claude-sonnet-4-6"
    finally:
        kernel.run(f"%model {before.removeprefix('model: ')}")
    still_chats(kernel)


def test_conversation_new_fork_resume_and_a_bad_id(kernel: KernelHarness) -> None:
    kernel.run("%conversation new")
    first = kernel.conversation()
    kernel.script({"text": "First answer."}, {"text": "Answer after resuming."})
    kernel.run("Remember the number 7.")

    kernel.run("%conversation new")
    fresh = kernel.conversation()
    assert fresh != first

    kernel.run(f"%conversation {first}")
    assert kernel.conversation() == first
    kernel.run("%conversation fork")
    fork = kernel.conversation()
    assert fork not in (first, fresh)
    texts = kernel.run("%%python\nt = %transcript\nprint(list(t.text))").text()
    assert "Remember the number 7." in texts, "a fork starts with its source's messages"
    assert "First answer." in texts

    error = refused(kernel, "%conversation c-0000000000000000")
    assert "c-0000000000000000" in error.reply["content"]["evalue"]
    assert kernel.conversation() == fork

    kernel.run(f"%conversation {first}")
    kernel.run("What was the number?")
    rows = kernel.transcript(first)
    assert [r["role"] for r in rows] == ["user", "assistant", "user", "assistant"]
    assert rows[-1]["content"][0]["text"] == "Answer after resuming."


def test_transcript_and_usage_return_rows_of_this_conversation(kernel: KernelHarness) -> None:
    kernel.run("%conversation new")
    kernel.script({"text": "Counted."})
    kernel.run("Count me in.")
    conversation = kernel.conversation()

    out = kernel.run(
        "%%python\n"
        "t = %transcript\n"
        "u = %usage\n"
        "print(list(t.role), list(t.text))\n"
        "print(len(u), sorted(set(u.conversation_id)), int(u.output_tokens.sum()) > 0)"
    ).text()

    transcript, usage = out.strip().splitlines()
    assert transcript == "['user', 'assistant'] ['Count me in.', 'Counted.']"
    assert usage == f"1 [{conversation!r}] True"
