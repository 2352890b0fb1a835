"""``neuralis kernel install``: a kernelspec that runs this Python, with its logos."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from neuralis_jupyter.kernel.kernel import classify


def test_install_into_a_prefix(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "neuralis_jupyter.cli", "kernel", "install", "--prefix", str(tmp_path)],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    spec_dir = tmp_path / "share" / "jupyter" / "kernels" / "neuralis"
    spec = json.loads((spec_dir / "kernel.json").read_text())
    assert spec["argv"][:3] == [sys.executable, "-m", "neuralis_jupyter.kernel"]
    assert spec["display_name"] == "Neuralis Agent"
    assert spec["language"] == "python"
    assert (spec_dir / "logo-64x64.png").read_bytes().startswith(b"\x89PNG")
    assert "installed the 'Neuralis Agent' kernelspec" in result.stdout


def test_install_for_the_user(tmp_path):
    """``--user`` goes to the user's Jupyter data directory, where Jupyter then finds it."""
    data, home = tmp_path / "jupyter-data", tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "JUPYTER_DATA_DIR": str(data)}
    # A name of its own: the environment's own "neuralis" spec may be found before the user's.
    command = [sys.executable, "-m", "neuralis_jupyter.cli", "kernel", "install", "--user", "--name", "mine"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    spec_dir = data / "kernels" / "mine"
    spec = json.loads((spec_dir / "kernel.json").read_text())
    assert spec["argv"][:3] == [sys.executable, "-m", "neuralis_jupyter.kernel"]
    assert spec["display_name"] == "Neuralis Agent"
    assert (spec_dir / "logo-64x64.png").read_bytes().startswith(b"\x89PNG")
    assert f"installed the 'Neuralis Agent' kernelspec 'mine' in {spec_dir}" in result.stdout
    assert not list(home.rglob("kernel.json")), "JUPYTER_DATA_DIR decides, not HOME"
    find = (
        "from jupyter_client.kernelspec import KernelSpecManager as M\nprint(M().find_kernel_specs()['mine'])"
    )
    found = subprocess.run([sys.executable, "-c", find], capture_output=True, text=True, env=env, timeout=60)
    assert found.stdout.strip() == str(spec_dir), found.stderr


def test_cells_are_routed_by_their_first_characters():
    assert classify("%%python\nx = 1\n") == ("python", "x = 1\n")
    assert classify("%guard auto") == ("python", "%guard auto")
    assert classify("  %%time\nsum(range(3))") == ("python", "  %%time\nsum(range(3))")
    assert classify("!ls") == ("python", "!ls")
    assert classify("") == ("python", "")
    assert classify("  Summarise the data frame df  \n") == ("chat", "Summarise the data frame df")
    assert classify("What does 50% mean?") == ("chat", "What does 50% mean?")
