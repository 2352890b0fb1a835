"""The default data root as a fresh install sees it: ``<jupyter data dir>/neuralis`` without NEURALIS_HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir

# The console script the README's first command puts next to the interpreter.
NEURALIS = Path(sys.executable).with_name("neuralis")


def doctor(env):
    assert NEURALIS.is_file(), f"{NEURALIS} is missing: install the package (pip install -e '.[test]')"
    return subprocess.run(
        [str(NEURALIS), "doctor"], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURALIS_", "JUPYTER_", "XDG_"))}
    env.update(HOME=str(home), JUPYTER_NO_CONFIG="1", NEURALIS_USER="alice")
    return env


def test_without_neuralis_home_the_data_root_is_in_the_jupyter_data_dir(tmp_path):
    data_dir = tmp_path / "jupyter-data"
    env = {**clean_env(tmp_path / "home"), "JUPYTER_DATA_DIR": str(data_dir)}
    result = doctor(env)
    assert result.returncode == 0, result.stderr
    assert f"data root:      {data_dir / 'neuralis'}\n" in result.stdout
    assert f"sqlite:///{data_dir / 'neuralis' / 'neuralis.db'}" in result.stdout
    assert (data_dir / "neuralis" / "neuralis.db").is_file()  # doctor migrated the store there
    assert not (tmp_path / "home").exists()  # and wrote nothing anywhere else


def test_without_any_jupyter_setting_the_data_root_follows_home(tmp_path, monkeypatch):
    env = clean_env(tmp_path / "home")
    monkeypatch.delenv("JUPYTER_DATA_DIR", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", env["HOME"])
    expected = Path(jupyter_data_dir()) / "neuralis"
    assert expected.is_relative_to(tmp_path / "home")  # jupyter_core's own answer, under this HOME
    result = doctor(env)
    assert result.returncode == 0, result.stderr
    assert f"data root:      {expected}\n" in result.stdout
    assert (expected / "neuralis.db").is_file()
