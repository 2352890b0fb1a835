"""The quickstart in a real JupyterLab: its tool call asks, a person clicks Approve, the turn completes.

The notebook runs in the Neuralis kernel replaying its committed cassette, with no NEURALIS_HEADLESS:
the approval is asked through the widget card, exactly as for a researcher. The recording approved the
call, so after the click the replay continues as recorded; a denial, or a click that never reached the
waiting turn, would leave the cell without the answer the model gave after the tool ran.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from .lab import LabPage, LabServer

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
QUICKSTART = NOTEBOOKS / "quickstart.ipynb"
CASSETTE = NOTEBOOKS / "quickstart.ipynb.cassette.jsonl"


def _approved_answers(cassette: Path) -> dict[str, str]:
    """For each tool call the recording approved: the text the model answered with once it had run."""
    lines = [json.loads(line) for line in cassette.read_text(encoding="utf-8").splitlines() if line.strip()]
    steps = [doc for doc in lines if doc.get("type") == "step"]
    approved = {
        doc["key"].removeprefix("approval:")
        for doc in lines
        if doc.get("type") == "answer" and doc["key"].startswith("approval:") and doc["answer"].get("approve")
    }
    answers = {}
    for index, step in enumerate(steps[:-1]):
        for event in step["events"]:
            if event["kind"] == "tool_use" and event["id"] in approved:
                following = steps[index + 1]["events"]
                answers[event["id"]] = "".join(e["text"] for e in following if e["kind"] == "text_delta")
    return answers


def _texts(outputs: list[dict[str, Any]]) -> str:
    """Every text an output carries (stream text, text/plain, text/markdown, text/html), whitespace folded."""
    parts = []
    for output in outputs:
        parts.append(str(output.get("text", "")))
        for mime, value in output.get("data", {}).items():
            if mime.startswith("text/"):
                parts.append(value if isinstance(value, str) else "".join(value))
    return re.sub(r"\s+", " ", " ".join(parts))


def _joined(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Outputs with multi-line strings joined (a saved notebook splits them into lists of lines)."""

    def join(value: Any) -> Any:
        return "".join(value) if isinstance(value, list) else value

    return [
        {**o, **({"data": {k: join(v) for k, v in o["data"].items()}} if "data" in o else {})}
        | ({"text": join(o["text"])} if "text" in o else {})
        for o in outputs
    ]


def _errors(cells: list[dict[str, Any]]) -> list[str]:
    return [
        f"cell {index}: {output['ename']}: {output['evalue']}"
        for index, cell in enumerate(cells)
        for output in cell["outputs"]
        if output.get("output_type") == "error"
    ]


@pytest.mark.slow
def test_quickstart_approve_in_jupyterlab(lab_server: LabServer, lab_page: LabPage, artifacts: Path) -> None:
    if not QUICKSTART.exists():
        pytest.skip(f"{QUICKSTART.relative_to(NOTEBOOKS.parent)} does not exist yet")
    answers = _approved_answers(CASSETTE)
    assert answers, f"{CASSETTE.name} records no approved tool call: nothing would ask"
    # Copies: JupyterLab saves what it opens, and the run must not touch the committed files.
    shutil.copy(QUICKSTART, lab_server.root / QUICKSTART.name)
    cassette = Path(shutil.copy(CASSETTE, lab_server.root / CASSETTE.name))
    lab_server.env.update(NEURALIS_CASSETTE=str(cassette), NEURALIS_CASSETTE_MODE="replay")
    lab_server.start()

    lab_page.open(QUICKSTART.name, kernel="neuralis")
    lab_page.run_all()
    clicked = lab_page.run_clicking("Approve", timeout=45)

    assert len(clicked) == len(answers), (
        f"clicked Approve in cells {clicked}; the cassette approved {answers}"
    )
    cells = lab_page.cells()
    assert not _errors(cells)
    shown = " ".join(_texts(cells[index]["outputs"]) for index in clicked)
    for tool_use_id, answer in answers.items():
        expected = re.sub(r"\s+", " ", answer).strip()
        assert expected in shown, f"after approving {tool_use_id} the turn did not answer {expected!r}"
    lab_page.screenshot(artifacts / "quickstart-approved.png", cell=clicked[0])

    # The ended turn replaced its live cards with their static bundle, in the page and in the saved file:
    # reopened without a live kernel, the notebook shows content, not "model not found".
    lab_page.save()
    saved = json.loads((lab_server.root / QUICKSTART.name).read_text(encoding="utf-8"))["cells"]
    for index in clicked:
        assert _joined(saved[index]["outputs"]) == _joined(cells[index]["outputs"]), (
            f"cell {index} was not saved as it is shown"
        )
        for where, outputs in (("page", cells[index]["outputs"]), ("saved file", saved[index]["outputs"])):
            bundles = [o["data"] for o in outputs if o["output_type"] in ("display_data", "execute_result")]
            assert bundles, f"cell {index} has no display outputs in the {where}"
            for data in bundles:
                assert WIDGET_VIEW not in data, f"a live widget view was left in cell {index} ({where})"
                assert {"text/markdown", "text/html", "text/plain"} <= data.keys(), (where, sorted(data))
