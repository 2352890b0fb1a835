"""Loopback fixtures for the web tools: a real DNS server, real HTTP servers, a tool context, a tiny PDF.

Nothing here leaves the machine: the DNS server answers from its own table (NXDOMAIN for anything
else) and never forwards; the HTTP servers listen on 127.0.0.1. Tests that resolve names always point
``c.WebSettings.dns_servers`` at :class:`DNSServer`, so no query reaches the system resolver.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socketserver
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from traitlets.config import Config

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.contracts import SessionContext
from neuralis_jupyter.packages.packageset import PackageSet
from neuralis_jupyter.providers.base import Model, UsageEvent
from neuralis_jupyter.providers.scripted import ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, StopSignal, ToolContext, ToolOutput, ToolRegistry
from neuralis_jupyter.runtime.context import TurnRequest
from neuralis_jupyter.runtime.meter import TurnMeter, utcnow
from neuralis_jupyter.runtime.results import ResultStore
from neuralis_jupyter.store import Store
from neuralis_jupyter.tools.environment import ToolEnvironment

#: A public address for names that must look public; the test suite's socket guard refuses to reach it.
PUBLIC_IP = "93.184.216.34"

# -- DNS ----------------------------------------------------------------------------------------------

Answer = Sequence[str] | Callable[[int], Sequence[str]]


class DNSServer:
    """A loopback UDP DNS server. ``add(name, A=[...], AAAA=[...])``; an answer may be a function of
    how many times that (name, type) was asked before (DNS rebinding). Every query is recorded."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], Answer] = {}
        self._cnames: dict[str, str] = {}
        self._lock = threading.Lock()
        self.queries: list[tuple[str, str]] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                data, sock = self.request
                sock.sendto(outer._answer(data), self.client_address)

        self._server = socketserver.ThreadingUDPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def add(self, name: str, *, A: Answer = (), AAAA: Answer = (), CNAME: str | None = None) -> DNSServer:
        name = name.lower().rstrip(".")
        self._records[(name, "A")] = A
        self._records[(name, "AAAA")] = AAAA
        if CNAME is not None:
            self._cnames[name] = CNAME.lower().rstrip(".")
        return self

    def count(self, name: str, rdtype: str = "A") -> int:
        with self._lock:
            return self.queries.count((name.lower().rstrip("."), rdtype))

    def _lookup(self, name: str, rdtype: str) -> Sequence[str] | None:
        with self._lock:
            asked = self.queries.count((name, rdtype))
            self.queries.append((name, rdtype))
        answer = self._records.get((name, rdtype))
        if answer is None:
            return None
        return answer(asked) if callable(answer) else answer

    def _answer(self, wire: bytes) -> bytes:
        import dns.message
        import dns.rcode
        import dns.rrset

        query = dns.message.from_wire(wire)
        response = dns.message.make_response(query)
        question = query.question[0]
        name = question.name.to_text().lower().rstrip(".")
        rdtype = dns.rdatatype.to_text(question.rdtype)
        if name in self._cnames:
            target = self._cnames[name]
            response.answer.append(dns.rrset.from_text(name + ".", 60, "IN", "CNAME", target + "."))
            name = target
        found = self._lookup(name, rdtype)
        if found is None:
            if (name, "A") not in self._records:
                response.set_rcode(dns.rcode.NXDOMAIN)
        elif found:
            response.answer.append(dns.rrset.from_text_list(name + ".", 60, "IN", rdtype, list(found)))
        return response.to_wire()

    def __enter__(self) -> DNSServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


# -- HTTP ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Route:
    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Hit:
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes


class WebServer:
    """A loopback HTTP/1.1 server answering from ``routes`` (path without query -> Route, or a function
    of the Hit); 404 otherwise. Every request is recorded in ``hits``."""

    def __init__(self) -> None:
        self.routes: dict[str, Route | Callable[[Hit], Route]] = {}
        self.hits: list[Hit] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                hit = Hit(
                    method=self.command,
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length) if length else b"",
                )
                outer.hits.append(hit)
                route = outer.routes.get(self.path.split("?", 1)[0], Route(status=404, body=b"not found"))
                if callable(route):
                    route = route(hit)
                self.send_response(route.status)
                for name, value in route.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(route.body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                # A client that stops reading at its byte cap closes early: that is what it should do.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(route.body)

            do_GET = do_POST = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def route(self, path: str, body: bytes | str = b"", *, status: int = 200, **headers: str) -> WebServer:
        data = body.encode() if isinstance(body, str) else body
        self.routes[path] = Route(
            status=status, body=data, headers={k.replace("_", "-"): v for k, v in headers.items()}
        )
        return self

    def json(self, path: str, doc: Any, *, status: int = 200) -> WebServer:
        return self.route(path, json.dumps(doc), status=status, content_type="application/json")

    def redirect(self, path: str, location: str, *, status: int = 302) -> WebServer:
        return self.route(path, status=status, location=location)

    def __enter__(self) -> WebServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@pytest.fixture(name="dns")
def dns_fixture() -> Iterator[DNSServer]:
    with DNSServer() as server:
        yield server


@pytest.fixture(name="web")
def web_fixture() -> Iterator[WebServer]:
    with WebServer() as server:
        yield server


# -- bodies -------------------------------------------------------------------------------------------


def tiny_pdf(*lines: str, title: str = "Tiny") -> bytes:
    """A valid one-page PDF with ``lines`` of Helvetica text, offsets and xref computed by hand."""
    text = "".join(f"({line}) Tj 0 -20 Td " for line in lines)
    stream = f"BT /F1 14 Tf 72 720 Td {text}ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Title (%s) >>" % title.encode(),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 6 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def gzip_bomb(decoded_size: int) -> bytes:
    return gzip.compress(b"\0" * decoded_size, compresslevel=9)


# -- a tool context ---------------------------------------------------------------------------------


@dataclass(kw_only=True)
class MeteredContext(ToolContext):
    """A ToolContext whose ``record_usage`` hook charges a real :class:`TurnMeter` the way the turn's
    own tool calls are charged (no step counted), and remembers every charge."""

    meter: TurnMeter
    charged: list[tuple[str, str, UsageEvent]] = field(default_factory=list)

    def __post_init__(self) -> None:
        def charge(provider: str, model: str, usage: UsageEvent) -> None:
            self.charged.append((provider, model, usage))
            self.meter.add(provider, model, usage, duration_ms=0, count_step=False)

        self.record_usage = charge


@dataclass(kw_only=True)
class Bench:
    store: Store
    session: SessionContext
    events: list[Any] = field(default_factory=list)

    def env(self, **traits: Mapping[str, Any]) -> ToolEnvironment:
        """A tool environment whose config holds ``traits``: ``env(WebSettings={"allowed_hosts": [...]})``."""
        config = Config({section: dict(values) for section, values in traits.items()})
        return ToolEnvironment(
            settings=self.store.settings, store=self.store, packages=PackageSet(()), config=config
        )

    def context(self, *, model: Model | None = None) -> MeteredContext:
        conversation = self.store.conversations.create(
            project_id=self.session.project_id,
            agent_id=self.session.agent_id or "",
            user_id=self.session.user_id,
        )
        session = self.session.replace(conversation_id=conversation.id, tool_use_id="toolu_test")
        request = TurnRequest(
            session=session, conversation=conversation, model=model or ScriptedModel(), tools=ToolRegistry()
        )
        runtime = AgentRuntime(self.store)
        return MeteredContext(
            session=session,
            request=request,
            runtime=runtime,
            results=ResultStore(conversation.path),
            step=1,
            emit=self.events.append,
            stop=StopSignal(),
            turn_state={},
            meter=TurnMeter(session=session, catalog=runtime.catalog, usage=None, started=utcnow()),
        )


@pytest.fixture(name="bench")
def bench_fixture(tmp_path: Any) -> Bench:
    store = Store(
        NeuralisSettings(data_root=str(tmp_path / "home"), store_url=f"sqlite:///{tmp_path / 'n.db'}")
    )
    session = SessionContext(user_id="alice", project_id="default", agent_id="assistant")
    return Bench(store=store, session=session)


def call(handler: Callable[..., Any], ctx: ToolContext, **args: Any) -> ToolOutput:
    """Run one handler call on its own event loop, as the runtime would from a turn."""
    out = asyncio.run(handler(args, ctx))
    assert isinstance(out, ToolOutput)
    return out
