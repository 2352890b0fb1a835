"""A loopback HTTP server that speaks the Anthropic and OpenAI streaming APIs from a script.

Provider code is tested through the real SDKs, pointed at this server::

    with FakeLLMServer() as server:
        server.enqueue(Reply(text="hi"), Fail(429, "slow down"))
        model = AnthropicModel("claude-haiku-4-5", api_key="test", base_url=server.anthropic_base_url,
                               max_retries=0)
        ...
        server.assert_complete()

Endpoints: ``POST /v1/messages`` (Anthropic) and ``POST /v1/chat/completions`` (OpenAI), streamed or
not as the request asks. Each request takes the next script entry: a :class:`Reply` (rendered in the
endpoint's format by :mod:`._render`), a :class:`Fail` (an HTTP error in the provider's error shape), a
:class:`Raw` list of stream events, or a callable that picks one from the :class:`RecordedRequest`.

Token counts are the Reply's when set; otherwise deterministic estimates: the request body JSON for
input (:attr:`RecordedRequest.estimated_input_tokens`), the reply text plus call inputs for output.

Retries: Fail responses say ``x-should-retry: false``, so an SDK makes one request per entry whatever its
``max_retries``; still, create test clients with ``max_retries=0`` so a connection hiccup cannot replay
a request against the next entry. A request that finds the script empty (or an unknown path) gets a 500
that says so, and is remembered in :attr:`FakeLLMServer.errors` for :meth:`assert_complete`.

The HTTP side (:mod:`._http`) is a stdlib ``ThreadingHTTPServer`` on a daemon thread speaking
HTTP/1.1 (chunked event streams, keep-alive); :meth:`close` also ends open connections, so no handler
thread or socket outlives the server.

``python -m neuralis_jupyter.testing.fake_llm --script replies.jsonl`` serves a script to another
process (a kernel, a notebook run by nbclient) and prints ``listening on http://127.0.0.1:PORT``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from ..providers.scripted import Call, Reply, estimate_tokens
from . import _render
from ._http import Response, Server
from ._render import Fail, Raw, Tokens

__all__ = ["Entry", "Fail", "FakeLLMServer", "Raw", "RecordedRequest", "load_script", "main"]

log = logging.getLogger(__name__)

Provider = Literal["anthropic", "openai"]
_ROUTES: dict[str, Provider] = {"/v1/messages": "anthropic", "/v1/chat/completions": "openai"}
_SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """One request as the server received it; secret header values are replaced by ``<redacted>``."""

    provider: Provider
    path: str
    body: dict[str, Any]
    #: Lower-case names.
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def estimated_input_tokens(self) -> int:
        """The input token count the server reports when the Reply does not set one."""
        return estimate_tokens(json.dumps(self.body, sort_keys=True))


Answer = Reply | Fail | Raw
Entry = Answer | Callable[[RecordedRequest], Answer]


def _output_tokens(reply: Reply) -> int:
    # The same estimate as ScriptedModel's, so a script costs the same through either.
    calls = "".join(json.dumps(dict(c.input), sort_keys=True) for c in reply.calls)
    return estimate_tokens(reply.text + calls)


def _not_found(message: str) -> Response:
    return Response(status=404, json={"error": {"type": "not_found_error", "message": message}})


class FakeLLMServer:
    """The fake LLM server; see the module docstring. Not started until :meth:`start` or ``with``."""

    def __init__(self, script: Iterable[Entry] = (), *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._script: deque[Entry] = deque(script)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FakeLLMServer:
        if self._server is None:
            self._server = Server((self._host, self._port), self._respond)
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="fake-llm",
                daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- addresses ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without a trailing slash."""
        if self._server is None:
            raise RuntimeError("the fake LLM server is not running: call start() or use it in a with block")
        host, port = self._server.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}"

    @property
    def anthropic_base_url(self) -> str:
        """The Anthropic SDK appends ``/v1/messages`` to its base URL."""
        return self.url

    @property
    def openai_base_url(self) -> str:
        """The OpenAI SDK appends ``/chat/completions``, so its base URL carries the ``/v1``."""
        return f"{self.url}/v1"

    # -- script ------------------------------------------------------------------------------------

    def enqueue(self, *entries: Entry) -> FakeLLMServer:
        with self._lock:
            self._script.extend(entries)
        return self

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def assert_no_errors(self) -> None:
        with self._lock:
            errors = list(self.errors)
        if errors:
            raise AssertionError("the fake LLM server saw unexpected requests:\n  " + "\n  ".join(errors))

    def assert_complete(self) -> None:
        """Every script entry was used and no request went unanswered."""
        self.assert_no_errors()
        if left := self.remaining:
            raise AssertionError(f"{left} scripted fake LLM responses were never requested")

    def _error(self, message: str) -> None:
        log.warning("fake LLM: %s", message)
        with self._lock:
            self.errors.append(message)

    def _id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}"

    def _next(self, request: RecordedRequest) -> Answer:
        with self._lock:
            self.requests.append(request)
            entry = self._script.popleft() if self._script else None
            count = len(self.requests)
        if entry is None:
            message = (
                f"request {count} ({request.provider} {request.path}) found the script empty: "
                "enqueue a Reply for every model call"
            )
            self._error(message)
            return Fail(500, f"fake LLM server: {message}")
        if isinstance(entry, Reply | Fail | Raw):
            return entry
        try:
            return entry(request)
        except Exception as exc:
            self._error(f"the scripted callable for request {count} raised {exc!r}")
            return Fail(500, f"fake LLM server: the scripted callable raised {exc!r}")

    # -- answering ---------------------------------------------------------------------------------

    def _respond(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> Response:
        provider = _ROUTES.get(path.split("?", 1)[0])
        if method != "POST" or provider is None:
            self._error(f"unexpected request {method} {path}: the fake serves POST {', '.join(_ROUTES)}")
            return _not_found(f"no route for {method} {path}")
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._error(f"{path}: the request body is not JSON: {exc}")
            return self._fail(provider, Fail(400, f"the request body is not JSON: {exc}"))
        redacted = {k: ("<redacted>" if k in _SECRET_HEADERS else v) for k, v in headers.items()}
        request = RecordedRequest(provider=provider, path=path, body=body, headers=redacted)
        answer = self._next(request)
        if isinstance(answer, Fail):
            return self._fail(provider, answer)
        request_id = self._id("req_fake")
        if isinstance(answer, Raw):
            if not request.stream:
                self._error(f"a Raw entry answered a non-streaming request to {path}")
                return self._fail(provider, Fail(500, "fake LLM server: Raw entries answer streams only"))
            frames = _render.raw_stream(answer, provider=provider)
            return Response(headers={"request-id": request_id}, frames=frames)
        return self._reply(request, answer.with_ids(), request_id)

    def _reply(self, request: RecordedRequest, reply: Reply, request_id: str) -> Response:
        tokens = Tokens(
            input=reply.input_tokens if reply.input_tokens is not None else request.estimated_input_tokens,
            output=reply.output_tokens if reply.output_tokens is not None else _output_tokens(reply),
            cache_read=reply.cache_read_tokens,
            cache_write=reply.cache_write_tokens,
        )
        model = str(request.body.get("model", "unknown"))
        if request.provider == "anthropic":
            headers = {"request-id": request_id}
            message_id = self._id("msg_fake")
            if request.stream:
                frames = _render.anthropic_stream(reply, model=model, message_id=message_id, tokens=tokens)
                return Response(headers=headers, frames=frames)
            doc = _render.anthropic_message(reply, model=model, message_id=message_id, tokens=tokens)
            return Response(headers=headers, json=doc)
        headers = {"x-request-id": request_id}
        completion_id = self._id("chatcmpl-fake")
        if request.stream:
            include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
            frames = _render.openai_stream(
                reply, model=model, completion_id=completion_id, tokens=tokens, include_usage=include_usage
            )
            return Response(headers=headers, frames=frames)
        doc = _render.openai_completion(reply, model=model, completion_id=completion_id, tokens=tokens)
        return Response(headers=headers, json=doc)

    def _fail(self, provider: Provider, fail: Fail) -> Response:
        request_id = self._id("req_fake")
        headers = {"request-id": request_id, "x-request-id": request_id}
        # The SDKs obey x-should-retry, so by default a retry never eats the next script entry.
        if fail.retry:
            headers.update({"x-should-retry": "true", "retry-after-ms": "1"})
        else:
            headers["x-should-retry"] = "false"
        if provider == "anthropic":
            doc = _render.anthropic_error(fail, request_id=request_id)
        else:
            doc = _render.openai_error(fail)
        return Response(status=fail.status, headers=headers, json=doc)


# -- script files and the command line ---------------------------------------------------------------

_REPLY_FIELDS = frozenset(f.name for f in fields(Reply))


def _entry(doc: Mapping[str, Any]) -> Reply | Fail:
    if "status" in doc:
        return Fail(int(doc["status"]), str(doc.get("message", "scripted failure")), type=doc.get("type"))
    unknown = set(doc) - _REPLY_FIELDS
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}; a reply has {sorted(_REPLY_FIELDS)}")
    calls = tuple(
        Call(name=c["name"], input=c.get("input", {}), id=c.get("id")) for c in doc.get("calls", ())
    )
    return replace(Reply(), **{**doc, "calls": calls})


def load_script(path: str | Path) -> list[Reply | Fail]:
    """A JSONL script: one reply a line (``{"text": ..., "calls": [{"name": ..., "input": {...}}]}``),
    or a failure (``{"status": 429, "message": ...}``); blank lines and ``#`` comments are skipped."""
    entries = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entries.append(_entry(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: {exc}") from exc
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m neuralis_jupyter.testing.fake_llm", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", type=Path, help="a JSONL file of replies, one a line")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    script = load_script(args.script) if args.script else []
    with FakeLLMServer(script, host=args.host, port=args.port) as server:
        print(f"listening on {server.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is the way to stop it
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
