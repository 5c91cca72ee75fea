"""A loopback router that keeps each session on one server by hashing a request header.

Why: past one machine, users put a router in front of their vLLM servers (vllm-router with
``--policy consistent_hash``, the production stack's ``--routing-logic session``, Ray Serve's
``ConsistentHashRouter``, llm-d's ``session-id-producer``). Such a router keeps a conversation
where its prefix cache is only if every request of it carries the same key in the header it
reads. Whether a client sends one, the same on each request of a conversation and another for
the next, can only be seen from a router's side.

Every request is forwarded to one of ``backends`` (tests/helpers/loopback_vllm.py's servers, or
fault proxies in front of them):

* a request that carries ``header`` goes to the backend its value ranks first by rendezvous
  hashing (sha256 of backend index and value): the same value, the same backend, for as long as
  it answers; one that refuses the connection is marked down, and the value's next backend serves
  (vllm-router's consistent hash "falls back to the first healthy worker");
* a request without it goes round robin over the live backends, as a router's default policy
  spreads them (so one conversation's requests land on several servers).

Each model request (a POST to ``.../completions``, ``.../chat/completions`` or ``.../responses``) is
recorded: the header's value (None when absent), the backend that answered, its status, and the
conversation it is of, read from the body as the loopback server reads it (a digest of the
first user message: ``loopback_vllm.conversation_digest``), so that where a conversation's
requests went is known without trusting the key. Other requests (``GET /v1/models``...) are
forwarded the same way and not recorded.

In a test::

    with LoopbackVLLM(latency=0.0, models=["m"]) as a, LoopbackVLLM(latency=0.0, models=["m"]) as b:
        with LoopbackRouter([a.url, b.url]) as router:
            ...  # OPENAI_BASE_URL=router.url
    router.records  # [RouteRecord(key=..., backend=0, status=200, conversation=...), ...]

Bodies are buffered whole both ways; plain threads, one backend connection per request; the
router stops itself after ``lifetime`` seconds. :meth:`LoopbackRouter.stop` cuts the exchanges
under way, as a router that goes away does.
"""

from __future__ import annotations

import hashlib
import http.client
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from fault_proxy import Reply, end_to_end, is_model_request, read_body
from loopback_vllm import MODEL_PATHS, READERS, conversation_digest
from serving import Serving, serve, shut
from typing_extensions import Self  # typing.Self is 3.11+; the project supports 3.10

#: The header the router hashes on unless told another (the plugin's default, vllm-router's first).
DEFAULT_HEADER = "x-session-id"


@dataclass
class RouteRecord:
    """One model request as the router saw it (``received``: ``time.time()``)."""

    number: int
    path: str
    key: str | None  # the header's value; None: the request carried none
    conversation: str  # a digest of the conversation's first user message ("" if unreadable)
    received: float
    backend: int | None = None  # index into ``backends`` of the one that answered; None: none did
    status: int | None = None


def ranked(key: str, count: int) -> list[int]:
    """The backends in the order ``key`` prefers them (rendezvous hashing: a backend that goes down
    moves only its own keys)."""
    return sorted(range(count), key=lambda i: hashlib.sha256(f"{i}\0{key}".encode()).digest(), reverse=True)


def conversation_of(path: str, body: bytes) -> str:
    """Which conversation a model request is of, read as the loopback server reads it."""
    api = MODEL_PATHS.get(urlsplit(path).path)
    try:
        parsed = json.loads(body) if api is not None else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return ""
    return conversation_digest(READERS[api](parsed).first_user)


class LoopbackRouter(Serving):
    """The router; see the module docstring."""

    backend_timeout = 120.0  # seconds for one exchange with a backend; stop() cuts it short anyway

    def __init__(
        self,
        backends: Sequence[str],
        *,
        header: str = DEFAULT_HEADER,
        host: str = "127.0.0.1",
        port: int = 0,
        lifetime: float | None = 600.0,
    ) -> None:
        if not backends:
            raise ValueError("a router needs at least one backend")
        self.backends = [urlsplit(url) for url in backends]
        paths = {parts.path.rstrip("/") for parts in self.backends}
        if len(paths) != 1:
            raise ValueError(f"the backends must share one API root (/v1), not {sorted(paths)}")
        self._base_path = paths.pop()
        self.header = header.lower()
        self.host, self.port = host, port
        self.lifetime = lifetime
        self.down: set[int] = set()  # backends that refused a connection
        self._lock = threading.Lock()
        self._records: list[RouteRecord] = []
        self._turns = itertools.count()  # round robin for requests without the header
        self._sockets: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    # -- life cycle

    def start(self) -> Self:
        self._stopping.clear()
        httpd = _Server((self.host, self.port), _handler_for(self))
        self._httpd, self.port = httpd, httpd.server_address[1]
        self._timer = serve(httpd, "loopback-router", self.lifetime, self.stop)
        return self

    def stop(self) -> None:
        """Stop serving; exchanges under way are cut (their clients see the connection close)."""
        self._stopping.set()
        with self._lock:
            sockets = list(self._sockets)
        httpd, self._httpd = self._httpd, None
        shut(httpd, self._timer)
        for sock in sockets:
            _shut(sock)

    @property
    def url(self) -> str:
        """The router's OpenAI base URL, with the backends' API root (``http://127.0.0.1:PORT/v1``)."""
        return f"http://{self.host}:{self.port}{self._base_path}"

    @property
    def records(self) -> list[RouteRecord]:
        with self._lock:
            return list(self._records)

    def reset(self) -> None:
        """Forget the records (what a rerun sends is counted afresh); the backends down stay down."""
        with self._lock:
            self._records.clear()

    # -- routing, called by the handler threads

    def order(self, key: str | None) -> list[int]:
        """The live backends in the order this request tries them."""
        with self._lock:
            live = [i for i in range(len(self.backends)) if i not in self.down]
            if key is None:
                turn = next(self._turns)
                return live[turn % len(live) :] + live[: turn % len(live)] if live else []
        return [i for i in ranked(key, len(self.backends)) if i in live]

    def _arrive(self, path: str, key: str | None, body: bytes) -> RouteRecord:
        with self._lock:
            record = RouteRecord(len(self._records) + 1, path, key, conversation_of(path, body), time.time())
            self._records.append(record)
        return record

    def _mark_down(self, backend: int) -> None:
        with self._lock:
            self.down.add(backend)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)
        if self._stopping.is_set():
            _shut(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)

    def forward(self, method: str, path: str, headers: Any, body: bytes, key: str | None) -> tuple[int | None, Reply]:
        """The first live backend's reply, in ``key``'s order, and which one gave it; a 502 if none could."""
        for backend in self.order(key):
            try:
                return backend, self._fetch(backend, method, path, headers, body)
            except ConnectionRefusedError:
                self._mark_down(backend)  # gone: the key's next backend serves it
            except (OSError, http.client.HTTPException) as error:  # a backend that broke off mid-answer
                return backend, _gateway_error(f"backend {backend} failed: {error!r}")
        return None, _gateway_error("no backend is left")

    def _fetch(self, backend: int, method: str, path: str, headers: Any, body: bytes) -> Reply:
        parts = self.backends[backend]
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = kind(parts.hostname or "127.0.0.1", parts.port, timeout=self.backend_timeout)
        try:
            conn.connect()
            assert conn.sock is not None
            self._track(conn.sock)
            conn.putrequest(method, path, skip_accept_encoding=True)  # Host: the backend's
            for name, value in end_to_end(headers.items(), headers.get("connection")):
                if name.lower() != "host":
                    conn.putheader(name, value)
            if body or method in ("POST", "PUT", "PATCH"):
                conn.putheader("content-length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            data = response.read()
            return Reply(response.status, end_to_end(response.getheaders(), response.getheader("connection")), data)
        finally:
            if conn.sock is not None:
                self._untrack(conn.sock)
            conn.close()


def _gateway_error(message: str) -> Reply:
    body = json.dumps({"error": {"message": message, "type": "bad_gateway"}}).encode()
    return Reply(502, [("content-type", "application/json")], body, gateway_error=True)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024  # many clients connect at once; the default 5 drops SYNs

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away, or a connection stop() cut, is no error of the router's."""
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, OSError)):
            return
        super().handle_error(request, client_address)


def _handler_for(router: LoopbackRouter) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            router._track(self.connection)

        def finish(self) -> None:
            try:
                super().finish()
            finally:
                router._untrack(self.connection)

        def do_GET(self) -> None:  # http.server's naming
            body = read_body(self.rfile, self.headers)
            if body is None:
                self.close_connection = True
                return
            key = self.headers.get(router.header)
            record = router._arrive(self.path, key, body) if is_model_request(self.command, self.path) else None
            backend, reply = router.forward(self.command, self.path, self.headers, body, key)
            if router._stopping.is_set():  # stop() cut the exchange: the client sees the connection close
                self.close_connection = True
                return
            if record is not None:
                record.backend, record.status = backend, reply.status
            self._send(reply)

        do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        def _send(self, reply: Reply) -> None:
            try:
                self.send_response_only(reply.status, reply.reason)
                for name, value in reply.headers:
                    if name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: no access log."""

    return Handler
