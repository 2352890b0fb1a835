"""The benchmark scripts still run against the current code (tiny sizes; nothing here is timed).

Benchmarks are not part of the suite's timing, but a script that no longer runs is a figure nobody can
reproduce: an API change (a new required field, a renamed module) must break a test, not a closing note.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

CASES = {
    "frames_bench.py": ["--usage-rows", "2000", "--long-rows", "2000", "--short-rows", "100"],
    # The peers (openai-agents, pydantic-ai) are the bench extra: absent here, reported and skipped.
    "step_overhead.py": ["--steps", "3", "--repeats", "1", "--warmup", "0"],
    "kernel_bench.py": ["--starts", "1", "--runs", "1"],
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("script", sorted(CASES))
def test_benchmark_script_runs_and_prints_its_ratios(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *CASES[script]],
        capture_output=True,
        text=True,
        timeout=220,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    ratios = re.findall(r"(\d+\.\d+)x", done.stdout)
    assert ratios, done.stdout
    assert all(float(r) > 0 for r in ratios)
