"""Record a run's model traffic to a cassette; replay it with no key and no network.

A cassette is a JSONL file. Its first line is a header; every later line is one of:

    {"type": "step", "step": n, "fingerprint": sha256, "request": {...}, "events": [...]}
    {"type": "tool_result", "step": n, "tool_use_id": ..., "result": {...}}
    {"type": "answer", "step": n, "key": "approval:<tool_use_id>" | "question:<tool_use_id>", "answer": {...}}

Record mode wraps a live model: each model call appends a ``step`` line (the normalised request and the
response events) and the runtime appends the ``tool_result`` lines it produced. Replay mode answers step
``n`` from the cassette after checking that the request matches the recorded one; a request that
differs raises :class:`CassetteMismatch` with a unified diff. The results of tools that are not
deterministic (a web fetch, a shell) come from the cassette too; deterministic tools run again.

``answer`` lines hold what a person (or ``neuralis run --answer``) answered while recording: an
approval (``{"approve": bool, "by": ..., "reason": ...}``) or a question's answer (``{"answer": [...]}``
or ``null``). A headless replay answers the same call the same way (``neuralis_jupyter.kernel.headless``).
Readers that predate them skip these lines.

Normalisation makes a replay match across runs: values that legitimately change between runs (the
conversation id, the request id, the data root, timestamps) are replaced by placeholders before
requests are compared.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import threading
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from .base import Model, ModelEvent, ModelRequest, StopEvent, TextDelta, ToolUseEvent, UsageEvent
from .errors import CassetteMismatch

__all__ = ["Cassette", "CassetteModel", "cassette_path_for"]

FORMAT = "neuralis-cassette/1"
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
_EVENT_TYPES: dict[str, type] = {
    "text_delta": TextDelta,
    "tool_use": ToolUseEvent,
    "usage": UsageEvent,
    "stop": StopEvent,
}


def cassette_path_for(notebook: str | Path) -> Path:
    """``analysis.ipynb`` -> ``analysis.ipynb.cassette.jsonl`` beside it."""
    path = Path(notebook)
    return path.with_name(path.name + ".cassette.jsonl")


def _request_doc(request: ModelRequest) -> dict[str, Any]:
    return {
        "model": request.model,
        "system": request.system,
        "system_dynamic": request.system_dynamic,
        "messages": list(request.messages),
        "tools": [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ],
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
    }


class Cassette:
    """The cassette file, shared by the model wrapper and the runtime's tool tape.

    ``volatile`` maps run-specific strings to the placeholder that stands for them; add to it with
    :meth:`volatile_value` as ids become known (a new conversation, a new request).
    """

    def __init__(self, path: str | Path, mode: Literal["record", "replay"]) -> None:
        self.path = Path(path)
        self.mode = mode
        self._volatile: dict[str, str] = {}
        self._lock = threading.Lock()
        self._step = 0
        self._steps: list[dict[str, Any]] = []
        self._results: dict[str, dict[str, Any]] = {}
        self._answers: dict[str, dict[str, Any]] = {}
        self.header: dict[str, Any] = {}
        if mode == "replay":
            self._load()
        elif mode == "record":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("", encoding="utf-8")
        else:
            raise ValueError(f"mode must be 'record' or 'replay', got {mode!r}")

    # -- normalisation ---------------------------------------------------------------------------

    def volatile_value(self, value: str | None, placeholder: str) -> None:
        if value:
            self._volatile[value] = f"<{placeholder}>"

    def normalise(self, request: ModelRequest) -> dict[str, Any]:
        text = json.dumps(_request_doc(request), sort_keys=True, ensure_ascii=False)
        # Longest first, so an id that contains another is replaced whole.
        for value in sorted(self._volatile, key=len, reverse=True):
            text = text.replace(json.dumps(value)[1:-1], self._volatile[value])
        text = _TIMESTAMP.sub("<timestamp>", text)
        return json.loads(text)

    @staticmethod
    def fingerprint(doc: Mapping[str, Any]) -> str:
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    # -- file ------------------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"no cassette at {self.path}: record one first (neuralis run --record)"
            ) from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{self.path}:{number} is not valid JSON: {exc}") from exc
            kind = doc.get("type")
            if kind == "header":
                self.header = doc
            elif kind == "step":
                self._steps.append(doc)
            elif kind == "tool_result":
                self._results[doc["tool_use_id"]] = doc["result"]
            elif kind == "answer":
                self._answers[doc["key"]] = doc["answer"]
        if self.header.get("format") != FORMAT:
            raise ValueError(f"{self.path} is not a {FORMAT} cassette; re-record it")

    def _append(self, doc: Mapping[str, Any]) -> None:
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            # Requests are already normalised (sorted); events keep the model's order (a tool input
            # replays with its keys as the model wrote them).
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")

    def write_header(self, *, provider: str, model_id: str, note: str | None = None) -> None:
        if self.mode == "record" and not self.header:
            self.header = {"type": "header", "format": FORMAT, "provider": provider, "model": model_id}
            if note:
                self.header["note"] = note
            self._append(self.header)

    # -- steps -----------------------------------------------------------------------------------

    def next_step(self) -> int:
        with self._lock:
            self._step += 1
            return self._step

    def record_step(self, step: int, request: dict[str, Any], events: Iterable[ModelEvent]) -> None:
        self._append(
            {
                "type": "step",
                "step": step,
                "fingerprint": self.fingerprint(request),
                "request": request,
                "events": [asdict(e) for e in events],
            }
        )

    def replay_step(self, step: int, request: dict[str, Any]) -> list[ModelEvent]:
        if step > len(self._steps):
            raise CassetteMismatch(
                step,
                f"the cassette holds {len(self._steps)} model calls and the run asked for call {step}",
                path=str(self.path),
            )
        recorded = self._steps[step - 1]
        if recorded["fingerprint"] != self.fingerprint(request):
            raise CassetteMismatch(step, _diff(recorded["request"], request), path=str(self.path))
        return [_event(doc) for doc in recorded["events"]]

    @property
    def steps_left(self) -> int:
        return max(0, len(self._steps) - self._step)

    def assert_complete(self) -> None:
        if self.mode == "replay" and self.steps_left:
            raise CassetteMismatch(
                self._step + 1,
                f"the run ended after {self._step} model calls but {len(self._steps)} were recorded",
                path=str(self.path),
            )

    # -- the runtime's tool tape -----------------------------------------------------------------

    def recorded_result(self, tool_use_id: str) -> dict[str, Any] | None:
        return self._results.get(tool_use_id) if self.mode == "replay" else None

    def record_result(self, tool_use_id: str, block: dict[str, Any]) -> None:
        if self.mode == "record":
            self._append(
                {"type": "tool_result", "step": self._step, "tool_use_id": tool_use_id, "result": block}
            )

    # -- recorded answers (approvals and questions) ----------------------------------------------

    def recorded_answer(self, key: str) -> dict[str, Any] | None:
        """The answer recorded under ``key`` (``approval:<tool_use_id>``, ``question:<tool_use_id>``)."""
        return self._answers.get(key) if self.mode == "replay" else None

    def record_answer(self, key: str, answer: Mapping[str, Any]) -> None:
        if self.mode == "record":
            self._answers[key] = dict(answer)
            self._append({"type": "answer", "step": self._step, "key": key, "answer": dict(answer)})

    @property
    def answer_keys(self) -> frozenset[str]:
        """The keys of every answer on the cassette (recorded so far, in record mode)."""
        return frozenset(self._answers)


def _event(doc: Mapping[str, Any]) -> ModelEvent:
    fields = dict(doc)
    cls = _EVENT_TYPES[fields.pop("kind")]
    return cls(**fields)


def _diff(recorded: Mapping[str, Any], actual: Mapping[str, Any]) -> str:
    a = json.dumps(recorded, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    b = json.dumps(actual, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    return "\n".join(difflib.unified_diff(a, b, "recorded", "this run", lineterm="", n=3))


class CassetteModel:
    """A :class:`Model` that records ``inner`` into, or replays from, a :class:`Cassette`."""

    def __init__(self, cassette: Cassette, inner: Model | None = None) -> None:
        if cassette.mode == "record" and inner is None:
            raise ValueError("recording needs the live model to record")
        self.cassette = cassette
        self._inner = inner

    @property
    def provider(self) -> str:
        return self._inner.provider if self._inner else str(self.cassette.header.get("provider", "replay"))

    @property
    def model_id(self) -> str:
        return self._inner.model_id if self._inner else str(self.cassette.header.get("model", "replay"))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        step = self.cassette.next_step()
        doc = self.cassette.normalise(request)
        if self.cassette.mode == "replay":
            for event in self.cassette.replay_step(step, doc):
                yield event
            return
        assert self._inner is not None
        self.cassette.write_header(provider=self._inner.provider, model_id=self._inner.model_id)
        events: list[ModelEvent] = []
        async for event in self._inner.stream(request):
            events.append(event)
            yield event
        self.cassette.record_step(step, doc, events)
