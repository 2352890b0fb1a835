"""``neuralis chat --guard``: a headless turn refuses what would ask, naming the profile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from neuralis_jupyter.providers.scripted import Call, Reply

MODULE = """
from pathlib import Path
PACKAGE_ROOT = Path(__file__).with_name("notes_pkg")

async def _write(args, ctx):
    Path(args["path"]).write_text(args["text"])
    return "written"

TOOL_HANDLERS = {"write_note": _write}
"""


@pytest.fixture
def notes_package(tmp_path):
    """An installed distribution contributing a write tool through the neuralis.packages entry point."""
    site = tmp_path / "site"
    pkg = site / "notes_pkg"
    (pkg / "tools").mkdir(parents=True)
    (pkg / "neuralis.json").write_text(
        json.dumps({"id": "notes", "version": "1.0.0", "trust": "trusted", "description": "Notes."})
    )
    (pkg / "tools" / "write_note.json").write_text(
        json.dumps(
            {
                "name": "write_note",
                "description": "Write a note to a file.",
                "input_schema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                    "required": ["path", "text"],
                },
                "x-neuralis": {"access": "write"},
            }
        )
    )
    (site / "notes_entry.py").write_text(textwrap.dedent(MODULE))
    info = site / "neuralis_notes-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: neuralis-notes\nVersion: 1.0.0\n")
    (info / "entry_points.txt").write_text("[neuralis.packages]\nnotes = notes_entry\n")
    return site


def chat(site, fake_llm, *args):
    env = {
        **os.environ,
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": fake_llm.anthropic_base_url,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        # The operator trusts the notes package: an untrusted one may not declare a write tool at all.
        "JUPYTER_NO_CONFIG": "",
        "JUPYTER_CONFIG_DIR": str(site / "cfg"),
    }
    (site / "cfg").mkdir(exist_ok=True)
    (site / "cfg" / "jupyter_neuralis_config.json").write_text(
        json.dumps({"NeuralisSettings": {"trusted_packages": ["notes"]}})
    )
    return subprocess.run(
        [sys.executable, "-m", "neuralis_jupyter.cli", "chat", "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def tool_result(stdout):
    events = [json.loads(line) for line in stdout.splitlines()]
    return next(e for e in events if e["type"] == "tool_call_finished")


@pytest.mark.parametrize("guard", ["safe", "balanced"])
def test_a_headless_ask_is_refused_naming_the_profile(notes_package, fake_llm, tmp_path, guard):
    target = tmp_path / "note.txt"
    fake_llm.enqueue(
        Reply(calls=(Call(name="write_note", input={"path": str(target), "text": "hi"}, id="w1"),)),
        Reply(text="could not write"),
    )
    result = chat(notes_package, fake_llm, "--guard", guard, "write a note")
    assert result.returncode == 0, result.stderr
    finished = tool_result(result.stdout)
    assert finished["outcome"] == "denied"
    assert f"'{guard}'" in finished["content"]
    assert "--guard auto" in finished["content"]
    assert not target.exists()
    # The model saw the tool (it is visible to an owner) and was told why it did not run.
    assert any(t["name"] == "write_note" for t in fake_llm.requests[0].body["tools"])


def test_auto_runs_it_without_asking(notes_package, fake_llm, tmp_path):
    target = tmp_path / "note.txt"
    fake_llm.enqueue(
        Reply(calls=(Call(name="write_note", input={"path": str(target), "text": "hi"}, id="w1"),)),
        Reply(text="written"),
    )
    result = chat(notes_package, fake_llm, "--guard", "auto", "write a note")
    assert result.returncode == 0, result.stderr
    assert tool_result(result.stdout)["outcome"] == "ok"
    assert target.read_text() == "hi"


def test_the_project_guard_is_the_default(notes_package, fake_llm, tmp_path, neuralis_home):
    project = neuralis_home / "projects" / "default" / "project.json"
    project.parent.mkdir(parents=True)
    project.write_text(json.dumps({"id": "default", "members": {"alice": "owner"}, "guard": "auto"}))
    target = tmp_path / "note.txt"
    fake_llm.enqueue(
        Reply(calls=(Call(name="write_note", input={"path": str(target), "text": "hi"}, id="w1"),)),
        Reply(text="written"),
    )
    result = chat(notes_package, fake_llm, "write a note")
    assert tool_result(result.stdout)["outcome"] == "ok"
