"""A notebook executed headless by nbclient in the Neuralis kernel leaves readable, static outputs."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter, MarkdownExporter

from .harness import WIDGET_VIEW, kernel_env

pytestmark = pytest.mark.slow

SCRIPT = [
    {"text": "Let me check.", "calls": [{"name": "python", "input": {"code": "sum(values)"}}]},
    {"text": "The **sum** is 10."},
    {"text": "", "calls": [{"name": "python", "input": {"code": "values.clear()"}}]},
    {"text": "I could not change it: the guard asks first."},
]


def _notebook() -> nbformat.NotebookNode:
    cells = [
        nbformat.v4.new_code_cell(
            "%%python\nimport ipywidgets\nvalues = [1, 2, 3, 4]\nipywidgets.IntSlider(value=7)"
        ),
        nbformat.v4.new_code_cell("%guard auto"),
        nbformat.v4.new_code_cell("Add up the values."),
        nbformat.v4.new_code_cell("%guard balanced"),
        nbformat.v4.new_code_cell("Now empty the list."),
        nbformat.v4.new_code_cell("%%python\nprint(len(values))"),
    ]
    return nbformat.v4.new_notebook(
        cells=cells,
        metadata={"kernelspec": {"name": "neuralis", "display_name": "Neuralis Agent", "language": "python"}},
    )


def test_a_headless_run_leaves_static_readable_outputs(tmp_path: Path) -> None:
    script = tmp_path / "script.jsonl"
    script.write_text("".join(json.dumps(r) + "\n" for r in SCRIPT), encoding="utf-8")
    env = kernel_env(tmp_path / "home", NEURALIS_HEADLESS="1", NEURALIS_DEMO_SCRIPT=str(script))
    nb = _notebook()

    NotebookClient(nb, timeout=30, kernel_name="neuralis", store_widget_state=True).execute(
        env=env, cwd=str(tmp_path)
    )

    saved = tmp_path / "run.ipynb"
    nbformat.write(nb, saved)
    nb = nbformat.read(saved, as_version=4)
    nbformat.validate(nb)
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]
    assert any(m["model_name"] == "IntSliderModel" for m in state["state"].values())
    chat_outputs = nb.cells[2].outputs + nb.cells[4].outputs
    assert chat_outputs
    for output in chat_outputs:
        assert output.output_type == "display_data"
        assert WIDGET_VIEW not in output.data, "a headless run creates no chat widgets"
        assert {"text/markdown", "text/html", "text/plain"} <= output.data.keys()
    first = "\n".join(o.data["text/markdown"] for o in nb.cells[2].outputs)
    assert "Let me check." in first
    assert "✓ done" in first
    assert "The **sum** is 10." in first
    second = "\n".join(o.data["text/plain"] for o in nb.cells[4].outputs)
    assert "denied — not run" in second
    assert "nobody can approve python in a headless run" in second
    assert nb.cells[5].outputs[0].text.strip() == "4", "the denied call did not run"

    markdown, _ = MarkdownExporter().from_notebook_node(nb)
    assert "<strong>sum</strong> is 10." in markdown
    assert "denied — not run" in markdown
    page, _ = HTMLExporter().from_notebook_node(nb)
    assert "<strong>sum</strong>" in page
