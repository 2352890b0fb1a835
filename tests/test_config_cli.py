from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from traitlets import TraitError

from neuralis_jupyter.config import NeuralisSettings, load_settings
from neuralis_jupyter.store.migrations import MIGRATIONS


def neuralis(*args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "neuralis_jupyter.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=60,
    )


def test_defaults_follow_the_environment(neuralis_home):
    settings = load_settings()
    assert settings.data_root == str(neuralis_home)
    assert settings.store_url == f"sqlite:///{neuralis_home / 'neuralis.db'}"
    assert settings.max_agents_per_project == 100


def test_settings_come_from_a_jupyter_config_file(tmp_path, monkeypatch):
    config_dir = tmp_path / "cfg"
    config_dir.mkdir()
    (config_dir / "jupyter_neuralis_config.json").write_text(
        json.dumps({"NeuralisSettings": {"max_agents_per_project": 7, "data_root": str(tmp_path / "d")}})
    )
    monkeypatch.delenv("JUPYTER_NO_CONFIG")
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(config_dir))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(config_dir))
    settings = load_settings()
    assert settings.max_agents_per_project == 7
    assert settings.data_root == str(tmp_path / "d")
    assert settings.store_url.endswith(str(tmp_path / "d" / "neuralis.db"))


@pytest.mark.parametrize(
    ("trait", "value", "fragment"),
    [
        ("max_agents_per_project", 0, "positive integer"),
        ("max_agents_per_project", -3, "positive integer"),
        ("store_url", "not a url at all", "SQLAlchemy URL"),
        ("data_root", "", "directory path"),
    ],
)
def test_bad_settings_say_what_is_wrong(trait, value, fragment):
    with pytest.raises(TraitError, match=fragment):
        NeuralisSettings(**{trait: value})


def test_doctor_reports_without_leaking_keys(neuralis_home):
    result = neuralis("doctor", env={"ANTHROPIC_API_KEY": "sk-ant-very-secret"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"data root:      {neuralis_home}" in out
    assert f"sqlite:///{neuralis_home / 'neuralis.db'}" in out
    # A fresh data root: nothing applied yet, every migration pending, then applied by doctor.
    assert f"schema version: 0 ({len(MIGRATIONS)} pending)" in out
    assert "migrated:       m001_usage_events, m002_audit_events" in out
    again = neuralis("doctor").stdout
    assert f"schema version: {len(MIGRATIONS)} (0 pending)" in again
    assert "migrated:" not in again
    assert "anthropic: credentials found (ANTHROPIC_API_KEY)" in out
    assert "openai:    no key (set OPENAI_API_KEY)" in out
    assert "very-secret" not in out + result.stderr
    assert (neuralis_home / "neuralis.db").is_file()


def test_doctor_sees_a_local_server_named_only_in_the_config(neuralis_home, tmp_path):
    config_dir = tmp_path / "cfg"
    config_dir.mkdir()
    (config_dir / "jupyter_neuralis_config.json").write_text(
        json.dumps({"NeuralisSettings": {"openai_base_url": "http://127.0.0.1:11434/v1"}})
    )
    env = {"JUPYTER_CONFIG_DIR": str(config_dir), "JUPYTER_CONFIG_PATH": str(config_dir)}
    env = {
        k: v for k, v in {**os.environ, **env}.items() if k not in ("JUPYTER_NO_CONFIG", "OPENAI_BASE_URL")
    }
    result = subprocess.run(
        [sys.executable, "-m", "neuralis_jupyter.cli", "doctor"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "openai:    credentials found (OPENAI_BASE_URL=http://127.0.0.1:11434/v1 (no key needed))"
        in result.stdout
    )


def test_doctor_lists_every_setting_with_its_help(neuralis_home):
    url = f"sqlite:///{neuralis_home / 'x.db'}"
    result = neuralis("doctor", "--settings", env={"NEURALIS_STORE_URL": url})
    assert result.returncode == 0, result.stderr
    assert "c.NeuralisSettings.max_agents_per_project = 100" in result.stdout
    assert "Seat ceiling" in result.stdout


def test_no_subcommand_prints_help():
    result = neuralis()
    assert result.returncode == 2
    assert "doctor" in result.stdout
