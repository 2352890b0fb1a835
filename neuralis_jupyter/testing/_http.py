"""The HTTP plumbing of the fake LLM server: a threaded stdlib server that writes what it is told.

The handler reads a request, asks its responder for a :class:`Response` and writes it: a JSON body
with a Content-Length, or an event stream in HTTP/1.1 chunks, flushed frame by frame and pausing as
each frame says. It knows nothing about providers or scripts.

The server remembers its open connections, so that :meth:`_Server.close` can shut them down: a handler
thread blocked on an idle keep-alive connection, or pausing in a slow stream, then ends at once and
``server_close()`` can join it. No thread or socket outlives the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ._render import Frame

__all__ = ["Responder", "Response", "Server"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Response:
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    #: A JSON body, or None for a stream of ``frames``.
    json: Mapping[str, Any] | None = None
    frames: Sequence[Frame] = ()


#: (method, path, headers, body) -> Response
Responder = Callable[[str, str, Mapping[str, str], bytes], Response]


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], responder: Responder) -> None:
        self.responder = responder
        self.closing = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close(self) -> None:
        """Stop serving, end every open connection and join the handler threads."""
        self.closing.set()
        self.shutdown()
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):  # already closed by its handler
                conn.shutdown(socket.SHUT_RDWR)
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server
    #: An idle keep-alive connection is dropped after this many seconds.
    timeout = 60
    # Headers and body go out in separate writes; with Nagle on, the second waits for the client's
    # delayed ACK (40 ms) on every keep-alive request.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("fake LLM: %s", format % args)

    def _respond(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        response = self.server.responder(self.command, self.path, headers, body)
        if response.json is not None:
            self._write_json(response)
        else:
            self._write_stream(response)

    do_GET = do_POST = _respond

    def _write_json(self, response: Response) -> None:
        data = json.dumps(response.json).encode()
        self.send_response(response.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _write_stream(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            for frame in response.frames:
                # Waiting on the closing event, not time.sleep, lets close() end a slow stream at once.
                if frame.delay and self.server.closing.wait(frame.delay):
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame.data), frame.data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            # The client stopped reading (a stopped turn closes its stream): that is not an error.
            log.debug("fake LLM: the client closed the stream early")
            self.close_connection = True
