"""build_model: references to ready models, and the package's import cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import neuralis_jupyter.providers as providers
from neuralis_jupyter.providers import (
    AnthropicModel,
    Message,
    MissingCredentials,
    Model,
    ModelRequest,
    OpenAIModel,
    StopEvent,
    UnknownModel,
    build_model,
    load_catalog,
)
from neuralis_jupyter.store.paths import DataRoot
from neuralis_jupyter.testing import FakeLLMServer, Reply, collect_events

USER_HI: Message = {"role": "user", "content": [{"type": "text", "text": "hi"}]}


def test_import_does_not_load_the_sdks() -> None:
    code = (
        "import sys, neuralis_jupyter.providers, neuralis_jupyter.testing; "
        "assert 'anthropic' not in sys.modules and 'openai' not in sys.modules, "
        "sorted(m for m in sys.modules if m in ('anthropic', 'openai'))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_names() -> None:
    assert set(providers.__all__) <= set(dir(providers))
    assert {"build_model", "Model", "ModelRequest", "ScriptedModel", "UsageEvent", "cost_usd"} <= set(
        providers.__all__
    )


def test_anthropic_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    model = build_model("anthropic:claude-haiku-4-5")
    assert isinstance(model, AnthropicModel)
    assert isinstance(model, Model)
    assert (model.provider, model.model_id, model.api_model_id) == (
        "anthropic",
        "claude-haiku-4-5",
        "claude-haiku-4-5",
    )
    assert model.base_url == "http://127.0.0.1:9"


def test_catalog_id_and_api_id_can_differ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    entry = {"provider": "anthropic", "id": "haiku", "api_model_id": "claude-haiku-4-5-20251001"}
    path.write_text(json.dumps({"models": [entry]}))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    model = build_model("anthropic:haiku", catalog=load_catalog(str(path)))
    assert isinstance(model, AnthropicModel)
    assert (model.model_id, model.api_model_id) == ("haiku", "claude-haiku-4-5-20251001")


def test_unknown_anthropic_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    with pytest.raises(UnknownModel, match="anthropic:claude-haiku-4-5"):
        build_model("anthropic:claude-0")


def test_any_openai_compatible_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    model = build_model("openai:llama3.2")
    assert isinstance(model, OpenAIModel)
    assert (model.model_id, model.base_url) == ("llama3.2", "http://127.0.0.1:11434/v1")


def test_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MissingCredentials, match="OPENAI_API_KEY"):
        build_model("openai:gpt-5.4")


def test_scripted_models_are_built_in_code() -> None:
    with pytest.raises(UnknownModel, match=r"ScriptedModel\(\[\.\.\.\]\) in code"):
        build_model("scripted:demo")


def test_unknown_provider() -> None:
    with pytest.raises(UnknownModel, match="anthropic, openai and scripted"):
        build_model("mistral:large")


def test_key_from_the_project_file_reaches_the_server(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data_root = DataRoot(tmp_path)
    path = data_root.project_dir("lab") / "credentials.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"ANTHROPIC_API_KEY": "sk-ant-project"}))
    path.chmod(0o600)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_llm.anthropic_base_url)
    fake_llm.enqueue(Reply(text="hello"))
    model = build_model("anthropic:claude-haiku-4-5", data_root=data_root, project_id="lab")
    events = collect_events(model, ModelRequest(model="claude-haiku-4-5", system="s", messages=(USER_HI,)))
    assert events[-1] == StopEvent(reason="end_turn", raw_reason="end_turn")
    assert fake_llm.requests[0].headers["authorization"] == "<redacted>"


def test_an_unpriced_model_is_refused_on_openais_own_api(monkeypatch: pytest.MonkeyPatch) -> None:
    # It would run unmetered there, past every spend limit; a local compatible server may serve any.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(UnknownModel, match="known openai models"):
        build_model("openai:gpt-4.1-2025-04-14-snapshot")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    with pytest.raises(UnknownModel):
        build_model("openai:some-new-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    assert build_model("openai:some-new-model").model_id == "some-new-model"
