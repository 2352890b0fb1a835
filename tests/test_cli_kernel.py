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


def test_cells_are_routed_by_their_first_characters():
    assert classify("%%python\nx = 1\n") == ("python", "x = 1\n")
    assert classify("%guard auto") == ("python", "%guard auto")
    assert classify("  %%time\nsum(range(3))") == ("python", "  %%time\nsum(range(3))")
    assert classify("!ls") == ("python", "!ls")
    assert classify("") == ("python", "")
    assert classify("  Summarise the data frame df  \n") == ("chat", "Summarise the data frame df")
    assert classify("What does 50% mean?") == ("chat", "What does 50% mean?")
