"""``neuralis chat`` as a user runs it: a subprocess talking to the loopback fake server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from neuralis_jupyter.providers.catalog import PRICING_BASIS
from neuralis_jupyter.providers.scripted import Call, Reply
from neuralis_jupyter.store import Store
from neuralis_jupyter.testing import Fail
from neuralis_jupyter.workbench import Workbench


def chat(*args, env, stdin=None, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "neuralis_jupyter.cli", "chat", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        input=stdin,
        timeout=timeout,
    )


@pytest.fixture
def anthropic_env(fake_llm):
    return {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake_llm.anthropic_base_url}


def test_streams_the_answer_and_summarises(fake_llm, anthropic_env):
    fake_llm.enqueue(Reply(text="Hello from the fake.", chunk=4, input_tokens=120, output_tokens=6))
    result = chat("hi there", env=anthropic_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello from the fake.\n"
    assert "completed · 1 step · 120 in / 6 out tokens" in result.stderr
    assert "$0.0004" in result.stderr  # 120 in, 6 out at claude-sonnet-4-6 list prices
    assert PRICING_BASIS in result.stderr  # the catalog's one sentence, not words of the CLI's own
    body = fake_llm.requests[0].body
    assert body["model"] == "claude-sonnet-4-6"  # the catalog default of the first provider with a key
    assert body["messages"][-1]["content"][-1]["text"] == "hi there"


def test_json_prints_one_event_per_line(fake_llm, anthropic_env):
    fake_llm.enqueue(Reply(text="ok"))
    result = chat("--json", "hi", env=anthropic_env)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[0]["type"] == "turn_started"
    assert events[-1]["type"] == "turn_settled"
    assert events[-1]["status"] == "completed"
    assert {"step_started", "text_delta", "usage"} <= {e["type"] for e in events}


def test_openai_when_only_openai_has_a_key(fake_llm):
    fake_llm.enqueue(Reply(text="from openai"))
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake_llm.openai_base_url}
    result = chat("hi", env=env)
    assert result.returncode == 0, result.stderr
    assert fake_llm.requests[0].provider == "openai"
    assert fake_llm.requests[0].body["model"] == "gpt-5.4"


def test_both_keys_set_chooses_anthropic(fake_llm, anthropic_env):
    fake_llm.enqueue(Reply(text="from anthropic"))
    env = {**anthropic_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake_llm.openai_base_url}
    result = chat("hi", env=env)
    assert result.returncode == 0, result.stderr
    [request] = fake_llm.requests
    assert (request.provider, request.body["model"]) == ("anthropic", "claude-sonnet-4-6")


def test_the_agents_model_beats_the_projects_which_beats_the_catalogs(fake_llm, anthropic_env, neuralis_home):
    bench = Workbench(store=Store.open(neuralis_home))
    session = bench.session("alice")
    bench.store.agents.create(
        session, name="Researcher", agent_id="researcher", model="anthropic:claude-opus-4-8"
    )
    project = bench.store.projects.get("default")
    bench.store.projects.save(replace(project, default_model="anthropic:claude-haiku-4-5"))
    fake_llm.enqueue(Reply(text="agent's model"), Reply(text="project's model"))
    by_agent = chat("--agent", "researcher", "hi", env=anthropic_env)
    by_project = chat("hi", env=anthropic_env)  # the default agent names no model
    assert (by_agent.returncode, by_project.returncode) == (0, 0), by_agent.stderr + by_project.stderr
    assert [r.body["model"] for r in fake_llm.requests] == ["claude-opus-4-8", "claude-haiku-4-5"]


def test_a_provider_error_exits_1_and_says_why(fake_llm, anthropic_env):
    fake_llm.enqueue(Fail(500, "the fake provider broke"))
    result = chat("hi", env=anthropic_env)
    assert result.returncode == 1
    assert "failed" in result.stderr
    assert "the fake provider broke" in result.stderr


def test_the_base_url_setting_beats_the_environment(fake_llm, tmp_path):
    """c.NeuralisSettings.openai_base_url points at the fake server; $OPENAI_BASE_URL at nothing."""
    config = tmp_path / "cfg"
    config.mkdir()
    settings = {"NeuralisSettings": {"openai_base_url": fake_llm.openai_base_url}}
    (config / "jupyter_neuralis_config.json").write_text(json.dumps(settings))
    fake_llm.enqueue(Reply(text="from the configured server"))
    env = {
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",  # refused at once if it were used
        "JUPYTER_NO_CONFIG": "",
        "JUPYTER_CONFIG_DIR": str(config),
    }
    # No key at all: a compatible server that is not OpenAI's own needs none, so OpenAI is the provider
    # with credentials and its catalog default is the model.
    result = chat("hi", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "from the configured server\n"
    assert fake_llm.requests[0].body["model"] == "gpt-5.4"


def test_explicit_model_wins(fake_llm, anthropic_env):
    fake_llm.enqueue(Reply(text="haiku here"))
    result = chat("--model", "anthropic:claude-haiku-4-5", "hi", env=anthropic_env)
    assert result.returncode == 0, result.stderr
    assert fake_llm.requests[0].body["model"] == "claude-haiku-4-5"


def test_no_credentials_names_the_variables():
    result = chat("hi", env={})
    assert result.returncode == 2
    assert "ANTHROPIC_API_KEY or OPENAI_API_KEY" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "claude", "hi"], "PROVIDER:MODEL"),
        (["--model", "anthropic:claude-9", "hi"], "known anthropic models"),
        (["--agent", "ghost", "hi"], "no agent 'ghost'"),
        (["--conversation", "c-missing", "hi"], "no conversation 'c-missing'"),
        (["--project", "__system__", "hi"], "sentinel"),
        (["   "], "empty"),
    ],
)
def test_bad_input_exits_2_with_a_message(anthropic_env, args, fragment):
    result = chat(*args, env=anthropic_env)
    assert result.returncode == 2
    assert fragment in result.stderr


def test_message_from_stdin_and_continuing_a_conversation(fake_llm, anthropic_env, neuralis_home):
    fake_llm.enqueue(Reply(text="first answer"), Reply(text="second answer"))
    first = chat("-", env=anthropic_env, stdin="remember 42")
    assert first.returncode == 0, first.stderr
    conversation = first.stderr.split("conversation ")[1].split("]")[0]
    second = chat("--conversation", conversation, "what did I say?", env=anthropic_env)
    assert second.returncode == 0, second.stderr
    history = fake_llm.requests[1].body["messages"]
    texts = [b["text"] for m in history for b in m["content"] if b.get("type") == "text"]
    assert texts == ["remember 42", "first answer", "what did I say?"]
    transcript = next(neuralis_home.glob(f"projects/default/agents/assistant/conversations/{conversation}"))
    assert len((transcript / "messages.jsonl").read_text().splitlines()) == 4


def test_spend_limit_refusal_exits_2(fake_llm, anthropic_env, neuralis_home):
    project = neuralis_home / "projects" / "default" / "project.json"
    project.parent.mkdir(parents=True)
    project.write_text(
        json.dumps(
            {
                "id": "default",
                "members": {"alice": "member"},
                "spend_limits": {"by_role": {"member": {"amount_usd": 0, "period": "day"}}},
            }
        )
    )
    result = chat("hi", env=anthropic_env)
    assert result.returncode == 2
    assert "per-user 'member' role daily spend limit of $0.00 is reached" in result.stderr
    assert fake_llm.requests == []


def test_budget_suspension_exits_3(fake_llm, anthropic_env, neuralis_home, tmp_path):
    config = tmp_path / "cfg"
    config.mkdir()
    (config / "jupyter_neuralis_config.json").write_text(
        json.dumps({"NeuralisSettings": {"max_agent_steps": 1}})
    )
    fake_llm.enqueue(Reply(text="calling", calls=(Call(name="read_tool_result", input={"id": "x"}),)))
    env = {**anthropic_env, "JUPYTER_NO_CONFIG": "", "JUPYTER_CONFIG_DIR": str(config)}
    result = chat("loop", env=env)
    assert result.returncode == 3, result.stderr
    assert "suspended" in result.stderr
    assert "max_steps budget ran out" in result.stderr


def test_ctrl_c_stops_cleanly_and_keeps_the_partial_answer(fake_llm, anthropic_env, neuralis_home):
    fake_llm.enqueue(Reply(text="word " * 400, chunk=5, delay=0.01))
    proc = subprocess.Popen(
        [sys.executable, "-m", "neuralis_jupyter.cli", "chat", "talk"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **anthropic_env},
    )
    first = proc.stdout.read(10)  # wait until the answer streams
    assert first.startswith("word")
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "stopped" in err
    rows = [
        json.loads(line)
        for path in neuralis_home.glob("projects/default/agents/assistant/conversations/*/messages.jsonl")
        for line in path.read_text().splitlines()
    ]
    assistant = next(r for r in rows if r["role"] == "assistant")
    assert assistant["stopped"] is True
    assert 0 < len(assistant["content"][0]["text"]) < len("word " * 400)
