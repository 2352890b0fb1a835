"""Where keys and base URLs come from: environment, then the project's credential file (a base URL
setting beats both)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from traitlets import TraitError

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.providers import Message, MissingCredentials, ModelRequest, build_model
from neuralis_jupyter.providers.credentials import (
    NO_KEY_PLACEHOLDER,
    PROVIDER_KEYS,
    Endpoint,
    InsecureCredentials,
    has_credentials,
    resolve_api_key,
    resolve_base_url,
    resolve_endpoint,
)
from neuralis_jupyter.store.paths import DataRoot
from neuralis_jupyter.testing import FakeLLMServer, Reply, collect_events

USER_HI: Message = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


@pytest.fixture
def data_root(tmp_path: Path) -> DataRoot:
    return DataRoot(tmp_path)


def _write_credentials(data_root: DataRoot, doc: dict, mode: int = 0o600) -> Path:
    path = data_root.project_dir("lab") / "credentials.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    path.chmod(mode)
    return path


def test_environment_first(monkeypatch: pytest.MonkeyPatch, data_root: DataRoot) -> None:
    _write_credentials(data_root, {"ANTHROPIC_API_KEY": "from-file"})
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    assert resolve_api_key("anthropic", data_root=data_root, project_id="lab") == "from-env"
    assert has_credentials("anthropic", data_root=data_root, project_id="lab") == "ANTHROPIC_API_KEY"


def test_project_credential_file(data_root: DataRoot) -> None:
    path = _write_credentials(data_root, {"ANTHROPIC_API_KEY": "sk-ant-file", "OPENAI_API_KEY": "sk-file"})
    assert resolve_api_key("anthropic", data_root=data_root, project_id="lab") == "sk-ant-file"
    assert resolve_api_key("openai", data_root=data_root, project_id="lab") == "sk-file"
    source = has_credentials("openai", data_root=data_root, project_id="lab")
    assert source == f"{path} (OPENAI_API_KEY)"
    assert "sk-file" not in source


@posix_only
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_readable_credential_file_is_refused(data_root: DataRoot, mode: int) -> None:
    path = _write_credentials(data_root, {"ANTHROPIC_API_KEY": "sk-ant-file"}, mode=mode)
    with pytest.raises(InsecureCredentials) as info:
        resolve_api_key("anthropic", data_root=data_root, project_id="lab")
    assert f"chmod 600 {path}" in str(info.value)
    assert "sk-ant-file" not in str(info.value)
    with pytest.raises(InsecureCredentials):
        has_credentials("anthropic", data_root=data_root, project_id="lab")


def test_bad_credential_file_says_which(data_root: DataRoot) -> None:
    path = data_root.project_dir("lab") / "credentials.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    path.chmod(0o600)
    with pytest.raises(Exception, match="cannot read the credential file"):
        resolve_api_key("anthropic", data_root=data_root, project_id="lab")


@pytest.mark.parametrize(
    ("provider", "variable"), [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")]
)
def test_missing_key_names_the_variable(data_root: DataRoot, provider: str, variable: str) -> None:
    with pytest.raises(MissingCredentials) as info:
        resolve_api_key(provider, data_root=data_root, project_id="lab")
    assert variable in str(info.value)
    assert info.value.variables == (variable,)
    assert has_credentials(provider, data_root=data_root, project_id="lab") is None


def test_missing_key_without_a_project() -> None:
    with pytest.raises(MissingCredentials, match="ANTHROPIC_API_KEY"):
        resolve_api_key("anthropic", data_root=None, project_id=None)


def test_local_openai_compatible_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    assert resolve_api_key("openai") == NO_KEY_PLACEHOLDER
    assert has_credentials("openai") == "OPENAI_BASE_URL=http://127.0.0.1:11434/v1 (no key needed)"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    assert resolve_api_key("openai") == "sk-real"  # a key that is set is still used


def test_explicit_compatible_base_url_needs_no_key() -> None:
    assert resolve_api_key("openai", base_url="http://gpu-box.lab:8000/v1") == NO_KEY_PLACEHOLDER


def test_openai_itself_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    with pytest.raises(MissingCredentials, match="OPENAI_API_KEY"):
        resolve_api_key("openai")


def test_anthropic_always_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9999")
    with pytest.raises(MissingCredentials, match="ANTHROPIC_API_KEY"):
        resolve_api_key("anthropic")


def test_base_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_base_url("anthropic") is None
    monkeypatch.setenv("ANTHROPIC_BASE_URL", " http://127.0.0.1:8080 ")
    assert resolve_base_url("anthropic") == "http://127.0.0.1:8080"
    monkeypatch.setenv("OPENAI_BASE_URL", "")
    assert resolve_base_url("openai") is None


def test_unknown_provider() -> None:
    with pytest.raises(ValueError, match="known: anthropic, openai"):
        resolve_api_key("mistral")


def test_one_table_of_variables() -> None:
    assert {p: k.api_key_vars for p, k in PROVIDER_KEYS.items()} == {
        "anthropic": ("ANTHROPIC_API_KEY",),
        "openai": ("OPENAI_API_KEY",),
    }
    assert {k.base_url_var for k in PROVIDER_KEYS.values()} == {"ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"}


# -- the base URL: setting, then environment, then the project's credential file ----------------------


def test_base_url_from_the_credential_file(data_root: DataRoot) -> None:
    _write_credentials(data_root, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8081", "OPENAI_BASE_URL": " "})
    assert resolve_base_url("anthropic", data_root=data_root, project_id="lab") == "http://127.0.0.1:8081"
    assert resolve_base_url("openai", data_root=data_root, project_id="lab") is None  # blank is unset
    assert resolve_base_url("anthropic") is None  # no project named: the file is not read


def test_base_url_setting_beats_environment_beats_file(
    monkeypatch: pytest.MonkeyPatch, data_root: DataRoot
) -> None:
    _write_credentials(data_root, {"OPENAI_BASE_URL": "http://file.lab:1/v1"})
    where = {"data_root": data_root, "project_id": "lab"}
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.lab:2/v1")
    assert resolve_base_url("openai", **where) == "http://env.lab:2/v1"
    assert (
        resolve_base_url("openai", setting=" http://setting.lab:3/v1 ", **where) == "http://setting.lab:3/v1"
    )
    assert resolve_base_url("openai", setting="", **where) == "http://env.lab:2/v1"  # empty: unset


def test_a_compatible_server_in_the_credential_file_needs_no_key(data_root: DataRoot) -> None:
    _write_credentials(data_root, {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"})
    assert resolve_api_key("openai", data_root=data_root, project_id="lab") == NO_KEY_PLACEHOLDER
    assert has_credentials("openai", data_root=data_root, project_id="lab") == (
        "OPENAI_BASE_URL=http://127.0.0.1:11434/v1 (no key needed)"
    )


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_the_credential_files_base_url_reaches_the_fake_server(
    fake_llm: FakeLLMServer, data_root: DataRoot, provider: str
) -> None:
    base = fake_llm.anthropic_base_url if provider == "anthropic" else fake_llm.openai_base_url
    var = PROVIDER_KEYS[provider]
    _write_credentials(data_root, {var.api_key_vars[0]: "sk-file", var.base_url_var: base})
    fake_llm.enqueue(Reply(text="hello"))
    ref = "anthropic:claude-haiku-4-5" if provider == "anthropic" else "openai:gpt-5.4-mini"
    model = build_model(ref, data_root=data_root, project_id="lab")
    events = collect_events(model, ModelRequest(model=model.model_id, system="s", messages=(USER_HI,)))
    assert events[-1].reason == "end_turn"
    assert [r.provider for r in fake_llm.requests] == [provider]


def test_the_base_url_setting_reaches_the_fake_server(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # refused at once if it were used
    fake_llm.enqueue(Reply(text="hello"))
    model = build_model("anthropic:claude-haiku-4-5", base_urls={"anthropic": fake_llm.anthropic_base_url})
    events = collect_events(model, ModelRequest(model=model.model_id, system="s", messages=(USER_HI,)))
    assert events[-1].reason == "end_turn"
    assert len(fake_llm.requests) == 1


@pytest.mark.parametrize("name", ["anthropic_base_url", "openai_base_url"])
def test_the_base_url_settings_are_validated(name: str) -> None:
    assert (
        getattr(NeuralisSettings(**{name: " http://127.0.0.1:8000/v1 "}), name) == "http://127.0.0.1:8000/v1"
    )
    assert getattr(NeuralisSettings(), name) == ""
    with pytest.raises(TraitError, match=f"{name} must be an http\\(s\\) URL .* got 'localhost:8000'"):
        NeuralisSettings(**{name: "localhost:8000"})


# -- a key and its endpoint resolve together --------------------------------------------------------------

ENV_KEYS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
DEFAULT_MODELS = {"anthropic": "claude-haiku-4-5", "openai": "gpt-5.4-mini"}
URL_VARS = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL"}


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize(
    "file_url",
    [
        "http://attacker.example:8080/v1",
        "http://127.0.0.1:9/v1",
        "https://api.openai.com.attacker.example/v1",
        "http://[::1]:9/v1",
    ],
)
def test_an_environment_key_never_goes_to_the_files_endpoint(
    monkeypatch: pytest.MonkeyPatch, data_root: DataRoot, provider: str, file_url: str
) -> None:
    monkeypatch.setenv(ENV_KEYS[provider], "sk-operator")
    monkeypatch.delenv(URL_VARS[provider], raising=False)
    _write_credentials(data_root, {URL_VARS[provider]: file_url})
    endpoint = resolve_endpoint(provider, data_root=data_root, project_id="lab")
    assert endpoint.api_key == "sk-operator"
    assert endpoint.base_url is None  # the provider's own API, not the file's server
    model = build_model(f"{provider}:{DEFAULT_MODELS[provider]}", data_root=data_root, project_id="lab")
    assert model.base_url is None


def test_the_files_endpoint_serves_the_files_key_or_no_key(
    monkeypatch: pytest.MonkeyPatch, data_root: DataRoot
) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    _write_credentials(
        data_root, {"OPENAI_BASE_URL": "http://gpu.lab:8000/v1", "OPENAI_API_KEY": "sk-project"}
    )
    assert resolve_endpoint("openai", data_root=data_root, project_id="lab") == Endpoint(
        base_url="http://gpu.lab:8000/v1", api_key="sk-project"
    )
    _write_credentials(data_root, {"OPENAI_BASE_URL": "http://gpu.lab:8000/v1"})
    assert resolve_endpoint("openai", data_root=data_root, project_id="lab") == Endpoint(
        base_url="http://gpu.lab:8000/v1", api_key=NO_KEY_PLACEHOLDER
    )


def test_the_operators_endpoint_takes_any_key(monkeypatch: pytest.MonkeyPatch, data_root: DataRoot) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://proxy.lab:1")
    _write_credentials(
        data_root, {"ANTHROPIC_API_KEY": "sk-ant-project", "ANTHROPIC_BASE_URL": "http://x.lab:2"}
    )
    where = {"data_root": data_root, "project_id": "lab"}
    assert resolve_endpoint("anthropic", **where) == Endpoint(
        base_url="http://proxy.lab:1", api_key="sk-ant-project"
    )
    assert (
        resolve_endpoint("anthropic", setting="http://setting.lab:3", **where).base_url
        == "http://setting.lab:3"
    )
