"""Shutting the kernel down stops the background shells its turns started, and says so in their
status files (a sandboxed shell would die with the kernel anyway; its record must not say "running")."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from jupyter_client.manager import start_new_kernel

from .harness import KernelHarness, kernel_env

pytestmark = pytest.mark.slow


def running(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


def test_a_graceful_shutdown_kills_background_shells(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    km, kc = start_new_kernel(kernel_name="neuralis", env=kernel_env(home), cwd=str(home))
    harness = KernelHarness(km, kc, home)
    marker = f"sleep 4{time.time_ns() % 100000:05d}"
    try:
        harness.run("%guard auto")
        harness.script(
            {
                "calls": [
                    {"name": "execute", "input": {"action": "shell", "command": marker, "background": True}}
                ]
            },
            {"text": "started"},
        )
        harness.run("start a long job")
        deadline = time.monotonic() + 10
        while not running(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running(marker), "the background shell should be running"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)  # a shutdown_request: the kernel's do_shutdown runs
    deadline = time.monotonic() + 10
    while running(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(marker)
    (meta,) = home.glob("projects/*/agents/*/conversations/*/shells/*/meta.json")
    assert json.loads(meta.read_text())["status"] != "running"
