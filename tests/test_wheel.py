"""The wheel a user installs carries what an editable checkout reads from the repository: the builtin
agent-core package (``_resources.builtin_package_dir`` looks under ``neuralis_jupyter/_builtin/``), the
"Neuralis Agent" kernelspec as shared data, and the ``neuralis`` console script."""

from __future__ import annotations

import configparser
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _files(folder: Path) -> set[str]:
    return {
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheel")
    # hatchling comes with the test extra: no build isolation, no index, so the build needs no network.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, (
        f"the wheel did not build (pip install '.[test]' brings hatchling):\n{result.stderr}"
    )
    (built,) = out.glob("neuralis_jupyter-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def _data_dir(wheel: zipfile.ZipFile) -> str:
    (data,) = {n.split("/")[0] for n in wheel.namelist() if n.split("/")[0].endswith(".data")}
    return data


@pytest.mark.timeout(300)
def test_the_wheel_carries_the_builtin_agent_core_package(wheel):
    source = REPO / "packages" / "agent-core"
    prefix = "neuralis_jupyter/_builtin/agent-core/"
    shipped = {n.removeprefix(prefix) for n in wheel.namelist() if n.startswith(prefix)}
    assert "neuralis.json" in shipped
    assert shipped == _files(source)
    manifest = json.loads(wheel.read(prefix + "neuralis.json"))
    assert manifest == json.loads((source / "neuralis.json").read_text(encoding="utf-8"))


@pytest.mark.timeout(300)
def test_the_wheel_installs_the_kernelspec_as_shared_data(wheel):
    prefix = f"{_data_dir(wheel)}/data/share/jupyter/kernels/neuralis/"
    shipped = {n.removeprefix(prefix) for n in wheel.namelist() if n.startswith(prefix)}
    assert shipped == _files(REPO / "kernelspec")
    spec = json.loads(wheel.read(prefix + "kernel.json"))
    assert spec["display_name"] == "Neuralis Agent"
    assert spec["argv"][:3] == ["python", "-m", "neuralis_jupyter.kernel"]


@pytest.mark.timeout(300)
def test_the_wheel_declares_the_console_script_and_no_repository_clutter(wheel):
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    parser = configparser.ConfigParser()
    parser.read_string(wheel.read(entry_points).decode())
    assert parser["console_scripts"]["neuralis"] == "neuralis_jupyter.cli:main"
    tops = {n.split("/")[0] for n in wheel.namelist()}
    assert {t for t in tops if not t.endswith((".dist-info", ".data"))} == {"neuralis_jupyter"}
    assert not [n for n in wheel.namelist() if "__pycache__" in n or n.endswith(".pyc")]
