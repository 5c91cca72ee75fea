"""A loopback HTTP proxy that breaks some model requests the way real servers and proxies do.

Why: a client of an OpenAI-compatible server meets more than clean error statuses. A gateway in
front of vLLM answers HTML with status 200, a crashing worker resets the connection, an
overloaded one stops answering, a dying one sends half a body. What the client then does (retry,
count the case as failed, give up the run) can only be tested against those faults as they
arrive on the wire, and against a server that still answers its health checks meanwhile.

The proxy forwards every request to ``upstream`` (in tests: tests/helpers/loopback_vllm.py's
``LoopbackVLLM``) and injects faults into *model requests* only: POSTs to a path ending in
``/completions``, ``/chat/completions`` or ``/responses``. Everything else (``GET /v1/models``,
the client's health check, ``GET /version``, ...) passes through untouched.

The faults (:data:`FAULT_KINDS`), all on HTTP/1.1, each sent after the request body was read in
full, so the client has finished sending before anything goes wrong:

* ``status``: ``status`` (default 500) with an OpenAI-style JSON error body.
* ``not_json``: 200, ``application/json``, a body that is HTML, as a gateway's error page.
* ``html``: 200, ``text/html``, the same page.
* ``empty_json``: 200, ``application/json``, ``{}``.
* ``truncated``: the upstream's answer with its full ``content-length`` but only the first half
  of its body, then the connection closes.
* ``reset``: no answer; the connection is reset (RST: the client sees ``ECONNRESET``).
* ``hang``: no answer until :meth:`FaultProxy.release` (then it is forwarded as usual) or
  :meth:`FaultProxy.stop` (then the connection closes).

Which request gets which fault: ``faults`` maps kinds to probabilities; one draw of
``random.Random(seed)`` per model request picks the first kind whose cumulative probability
exceeds it, so a seed and a request order give the same faults every time. ``only`` (model
request numbers, 1-based) instead faults exactly those requests with the first kind of
``faults``. The ``hang`` knob makes every new model request hang. ``faults``, ``only``,
``status`` and ``hang`` may be changed while the proxy runs.

In a test::

    with LoopbackVLLM(latency=0.0, models=["m"]) as server, FaultProxy(server.url, faults={"reset": 0.2}) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="unused", max_retries=0)
        ...
    proxy.stats()  # {"model_requests": ..., "forwarded": ..., "faults": {"reset": ...}, ...}

Bodies are buffered whole both ways (a streamed answer arrives all at once). Plain threads, one
upstream connection per request; the proxy stops itself after ``lifetime`` seconds.
"""

from __future__ import annotations

import http.client
import io
import json
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from serving import Serving, serve, shut
from typing_extensions import Self  # typing.Self is 3.11+; the project supports 3.10

FAULT_KINDS = ("status", "not_json", "html", "empty_json", "truncated", "reset", "hang")
MODEL_PATH_ENDINGS = ("/completions", "/chat/completions", "/responses")
# Hop-by-hop headers (RFC 9110 7.6.1) belong to one connection and are not forwarded; the
# lengths are recomputed, the host is the upstream's.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
GATEWAY_PAGE = b"<html><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>\n"
_MAX_LINE = 65537  # http.server's own bound on a request line


@dataclass
class FaultRecord:
    """One model request as the proxy saw it (times: ``time.time()``, seconds since the epoch)."""

    number: int  # 1-based, counted over model requests
    method: str
    path: str
    fault: str | None  # the kind injected, None when forwarded untouched
    received: float  # when its body had been read
    status: int | None = None  # the status line the client got; None: none (reset, hang cut by stop)
    forwarded: bool = False  # the upstream's answer went back in full (a released hang included)
    answered: float | None = None  # when the proxy was done with it


@dataclass(frozen=True)
class Reply:
    """An answer to send: end-to-end headers only; content-length is written from ``body``."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    reason: str | None = None  # None: the standard phrase
    gateway_error: bool = False  # the proxy's own 502: the upstream failed


def canned_reply(kind: str, status: int) -> Reply:
    """The answer of a fault that needs no upstream."""
    if kind == "status":
        error = {"error": {"message": f"injected fault: HTTP {status}", "type": "server_error"}}
        return Reply(status, [("content-type", "application/json")], json.dumps(error).encode())
    if kind == "not_json":  # a gateway's error page under a JSON content type
        return Reply(200, [("content-type", "application/json")], GATEWAY_PAGE)
    if kind == "html":
        return Reply(200, [("content-type", "text/html; charset=utf-8")], GATEWAY_PAGE)
    if kind == "empty_json":
        return Reply(200, [("content-type", "application/json")], b"{}")
    raise ValueError(f"fault {kind!r} is not a canned reply")


def is_model_request(method: str, path: str) -> bool:
    return method == "POST" and urlsplit(path).path.rstrip("/").endswith(MODEL_PATH_ENDINGS)


def end_to_end(headers: Iterable[tuple[str, str]], connection: str | None) -> list[tuple[str, str]]:
    """``headers`` less hop-by-hop ones, those the Connection header names, and content-length."""
    named = {token.strip().lower() for token in (connection or "").split(",")}
    dropped = HOP_BY_HOP | named | {"content-length"}
    return [(name, value) for name, value in headers if name.lower() not in dropped]


def read_body(rfile: io.BufferedIOBase, headers: Message) -> bytes | None:
    """The whole request body (by content-length or chunked); None if it ended early or is malformed."""
    try:
        if "chunked" in (headers.get("transfer-encoding") or "").lower():
            return _read_chunked(rfile)
        length = int(headers.get("content-length") or 0)
    except ValueError:
        return None
    body = rfile.read(length) if length > 0 else b""
    return body if len(body) == length else None


def _read_chunked(rfile: io.BufferedIOBase) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        line = rfile.readline(_MAX_LINE)
        if not line:
            return None
        size = int(line.split(b";", 1)[0].strip(), 16)  # chunk extensions after ';' are ignored
        if size == 0:
            break
        chunk = rfile.read(size)
        if len(chunk) < size:
            return None
        chunks.append(chunk)
        rfile.readline(_MAX_LINE)  # the CRLF that ends a chunk
    while rfile.readline(_MAX_LINE) not in (b"\r\n", b"\n", b""):  # trailers, not forwarded
        pass
    return b"".join(chunks)


class FaultProxy(Serving):
    """The proxy; see the module docstring. ``faults``, ``only``, ``status`` and ``hang`` may be
    changed while it runs."""

    upstream_timeout = 120.0  # seconds for one upstream exchange; stop() cuts it short anyway

    def __init__(
        self,
        upstream: str,
        *,
        faults: Mapping[str, float] | None = None,
        seed: int = 0,
        only: Iterable[int] | None = None,
        status: int = 500,
        host: str = "127.0.0.1",
        port: int = 0,
        lifetime: float | None = 600.0,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream must be an http(s) URL, not {upstream!r}")
        self.upstream = upstream
        self._upstream_https = parts.scheme == "https"
        self._upstream_host = parts.hostname
        self._upstream_port = parts.port or (443 if self._upstream_https else 80)
        self._base_path = parts.path.rstrip("/")  # the proxy's URL carries the same suffix
        self.faults = faults or {}
        self.only = only
        self.status = status
        self.hang = False  # every new model request hangs until release()
        self.host, self.port = host, port
        self.lifetime = lifetime  # None: until stopped
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # release() and stop() wake held requests
        self._records: list[FaultRecord] = []
        self._other_requests = 0
        self._hanging = 0
        self._released_upto = 0  # model requests numbered up to this one are no longer held
        self._sockets: set[socket.socket] = set()  # open connections, both sides: stop() ends them
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    # -- knobs

    @property
    def faults(self) -> dict[str, float]:
        """A copy: assign a new mapping to change the faults (it is checked then)."""
        return dict(self._faults)

    @faults.setter
    def faults(self, faults: Mapping[str, float]) -> None:
        unknown = set(faults) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULT_KINDS}")
        if any(not 0.0 <= p <= 1.0 for p in faults.values()) or sum(faults.values()) > 1.0 + 1e-9:
            raise ValueError(f"fault probabilities must lie in [0, 1] and add up to at most 1: {dict(faults)}")
        self._faults = dict(faults)  # a copy: the caller's dict changing later changes nothing

    @property
    def only(self) -> frozenset[int] | None:
        return self._only

    @only.setter
    def only(self, numbers: Iterable[int] | None) -> None:
        self._only = None if numbers is None else frozenset(numbers)

    # -- life cycle

    def start(self) -> Self:
        self._stopping.clear()
        httpd = _Server((self.host, self.port), _handler_for(self))
        self._httpd, self.port = httpd, httpd.server_address[1]
        self._timer = serve(httpd, "fault-proxy", self.lifetime, self.stop)
        return self

    def stop(self) -> None:
        """Stop serving; held requests are closed unanswered, exchanges under way are cut."""
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
            sockets = list(self._sockets)
        httpd, self._httpd = self._httpd, None
        shut(httpd, self._timer)
        for sock in sockets:  # wakes threads blocked reading a keep-alive client or the upstream
            _shut(sock)

    @property
    def url(self) -> str:
        """The proxy's base URL, with the upstream's path (``http://127.0.0.1:PORT/v1``)."""
        return f"http://{self.host}:{self.port}{self._base_path}"

    def release(self) -> None:
        """Let the model requests that arrived so far go on if held: they are forwarded as usual.
        Later ones that draw ``hang`` (or meet the ``hang`` knob) are held again."""
        with self._changed:
            self._released_upto = len(self._records)
            self._changed.notify_all()

    # -- statistics

    @property
    def records(self) -> list[FaultRecord]:
        with self._lock:
            return list(self._records)

    def stats(self) -> dict[str, Any]:
        """model_requests, forwarded (upstream answers sent in full), faults (kind: count, kinds
        that occurred), other_requests (passed through), hanging_now."""
        with self._lock:
            faults: dict[str, int] = {}
            for record in self._records:
                if record.fault is not None:
                    faults[record.fault] = faults.get(record.fault, 0) + 1
            return {
                "model_requests": len(self._records),
                "forwarded": sum(r.forwarded for r in self._records),
                "faults": faults,
                "other_requests": self._other_requests,
                "hanging_now": self._hanging,
            }

    # -- bookkeeping, called by the handler threads

    def _arrive(self, method: str, path: str) -> FaultRecord:
        """Number a model request (its body read) and choose its fault."""
        with self._lock:
            number = len(self._records) + 1
            draw = self._rng.random()  # drawn for every model request, so knobs do not shift the sequence
            record = FaultRecord(number, method, path, self._choose(number, draw), time.time())
            self._records.append(record)
        return record

    def _choose(self, number: int, draw: float) -> str | None:
        if self.hang:
            return "hang"
        if self._only is not None:
            return next(iter(self._faults), "status") if number in self._only else None
        cumulative = 0.0
        for kind, probability in self._faults.items():
            cumulative += probability
            if draw < cumulative:
                return kind
        return None

    def _other(self) -> None:
        with self._lock:
            self._other_requests += 1

    def _hold(self, record: FaultRecord) -> bool:
        """Hold a request until release() covers it (True) or stop() (False)."""
        with self._changed:
            self._hanging += 1
            try:
                while self._released_upto < record.number and not self._stopping.is_set():
                    self._changed.wait(0.5)  # woken by release()/stop(); the timeout is a backstop
            finally:
                self._hanging -= 1
            return not self._stopping.is_set()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)
        if self._stopping.is_set():  # stop() ran while this one was opening
            _shut(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)

    def _fetch(self, method: str, path: str, headers: Message, body: bytes) -> Reply:
        """One exchange with the upstream; raises OSError or http.client.HTTPException."""
        kind = http.client.HTTPSConnection if self._upstream_https else http.client.HTTPConnection
        conn = kind(self._upstream_host, self._upstream_port, timeout=self.upstream_timeout)
        try:
            conn.connect()
            assert conn.sock is not None
            self._track(conn.sock)
            conn.putrequest(method, path, skip_accept_encoding=True)  # Host: the upstream's
            for name, value in end_to_end(headers.items(), headers.get("connection")):
                if name.lower() != "host":
                    conn.putheader(name, value)
            if body or method in ("POST", "PUT", "PATCH"):
                conn.putheader("content-length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            data = response.read()
            kept = end_to_end(response.getheaders(), response.getheader("connection"))
            return Reply(response.status, kept, data, response.reason)
        finally:
            if conn.sock is not None:
                self._untrack(conn.sock)
            conn.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() must not wait for a held request's thread
    request_queue_size = 1024  # many clients connect at once; the default 5 drops SYNs

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (killed, interrupted, timed out) is no error of the proxy's."""
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def _handler_for(proxy: FaultProxy) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            proxy._track(self.connection)

        def finish(self) -> None:
            try:
                super().finish()
            finally:
                proxy._untrack(self.connection)

        def do_GET(self) -> None:  # http.server's naming
            body = read_body(self.rfile, self.headers)  # in full before anything is decided
            if body is None:
                self.close_connection = True
            elif is_model_request(self.command, self.path):
                self._model_request(body)
            else:
                proxy._other()
                self._send(self._forward(body))

        do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        def _model_request(self, body: bytes) -> None:
            record = proxy._arrive(self.command, self.path)
            try:
                self._answer(record, body)
            finally:
                record.answered = time.time()

        def _answer(self, record: FaultRecord, body: bytes) -> None:
            kind = record.fault
            if kind == "reset":
                self._reset()
            elif kind == "hang" and not proxy._hold(record):
                self.close_connection = True  # stopped while held: close, say nothing
            elif kind in ("status", "not_json", "html", "empty_json"):
                record.status = self._send(canned_reply(kind, proxy.status))
            else:  # no fault, truncated, or a released hang
                reply = self._forward(body)
                cut = len(reply.body) // 2 if reply is not None and kind == "truncated" else None
                record.status = self._send(reply, cut=cut)
                complete = reply is not None and not reply.gateway_error and cut is None
                record.forwarded = complete and record.status is not None

        def _forward(self, body: bytes) -> Reply | None:
            """The upstream's reply, a 502 if it failed, None if stop() cut the exchange."""
            try:
                return proxy._fetch(self.command, self.path, self.headers, body)
            except (OSError, http.client.HTTPException) as error:
                if proxy._stopping.is_set():
                    return None
                message = {"error": {"message": f"upstream failed: {error!r}", "type": "bad_gateway"}}
                return Reply(
                    502, [("content-type", "application/json")], json.dumps(message).encode(), gateway_error=True
                )

        def _send(self, reply: Reply | None, cut: int | None = None) -> int | None:
            """Write ``reply`` (only ``cut`` bytes of its body, then close, if given); the status
            sent, None when nothing was (no reply: just close) or the client was gone."""
            if reply is None:
                self.close_connection = True
                return None
            try:
                self.send_response_only(reply.status, reply.reason)
                for name, value in reply.headers:
                    self.send_header(name, value)
                if not any(name.lower() == "date" for name, _ in reply.headers):
                    self.send_header("date", self.date_time_string())
                self.send_header("content-length", str(len(reply.body)))  # the full length, even when cut
                self.end_headers()
                self.wfile.write(reply.body if cut is None else reply.body[:cut])
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                self.close_connection = True
                return None
            if cut is not None:
                self.close_connection = True
            return reply.status

        def _reset(self) -> None:
            """Close with RST, not FIN: with SO_LINGER on and a zero timeout, close() aborts."""
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # The socket closes for real once rfile (its makefile) lets go of it; socketserver's
            # shutdown(SHUT_WR) afterwards, which would send a FIN first, then fails harmlessly.
            self.connection.close()
            self.rfile.close()
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: no access log."""

    return Handler
