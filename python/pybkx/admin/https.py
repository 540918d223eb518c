"""The admin API over HTTPS: a listening socket, a fixed pool of worker threads that each take
one connection at a time, do its TLS handshake and serve one request with the standard
library's WSGI request handler, then close it. It owns connections and their limits; the
application (the Router) owns requests and responses, as under waitress.

Why not waitress: it has no TLS, and its event loop cannot drive a TLS handshake on its
non-blocking sockets. The limits are the same settings: ``threads`` requests at once,
``max_connections`` connections open or waiting (one more is closed at once), every read and
write bounded by the idle timeout, and every connection by a deadline after which it is shut,
so a client that trickles bytes cannot hold a worker for longer than that. Request bodies are
bounded by the Router (413 before reading). Each connection carries one request (answered
as HTTP/1.0, then closed), so a kept-alive client holds no worker between requests; a silent
one holds it for the idle timeout at most.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler

__all__ = ["HttpsServer"]

logger = logging.getLogger(__name__)

_IDLE_TIMEOUT_S = 30.0
"""Longest wait for one read or write of a connection (waitress's channel timeout)."""
_CONNECTION_DEADLINE_S = 60.0
"""Longest life of one connection, handshake to response."""
_POLL_S = 0.5
"""How often the accept loop and idle workers look at the stop flag and the deadlines."""
_STOP_TIMEOUT_S = 5.0
_MAX_REQUEST_LINE = 65536
"""Longest request line read (the standard library's own bound)."""
_LINGER_S = 2.0
"""Longest wait, after the answer, for the client to close (see ``_linger``)."""
_LINGER_SLACK_BYTES = 64 * 1024
"""What the linger reads beyond the largest body: TLS records' framing."""


class _Site:
    """What the standard library's WSGI handler asks of its server."""

    def __init__(self, app: Callable[..., Iterable[bytes]], host: str, port: int) -> None:
        self._app = app
        self.base_environ: dict[str, Any] = {
            "SERVER_NAME": host,
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PORT": str(port),
            "REMOTE_HOST": "",
            "CONTENT_LENGTH": "",
            "SCRIPT_NAME": "",
            "HTTPS": "on",  # wsgi.url_scheme is "https"
        }

    def get_app(self) -> Callable[..., Iterable[bytes]]:
        return self._app


class _Gateway(ServerHandler):
    """The standard library's WSGI gateway, naming itself as waitress does for pybkx (no
    Python version in the Server header)."""

    server_software = "pybkx"


class _Handler(WSGIRequestHandler):
    """One request on a TLS socket; logs through ``logging`` rather than to stderr."""

    server_version = "pybkx"
    sys_version = ""

    def handle(self) -> None:
        """Reads one request and runs the application (the base's steps, with _Gateway)."""
        self.raw_requestline = self.rfile.readline(_MAX_REQUEST_LINE + 1)
        if len(self.raw_requestline) > _MAX_REQUEST_LINE:
            self.requestline, self.request_version, self.command = "", "", ""
            self.send_error(414)
            return
        if not self.parse_request():
            return
        gateway = _Gateway(
            self.rfile,
            self.wfile,  # type: ignore[arg-type]  # a buffered writer, as the base passes it
            self.get_stderr(),
            self.get_environ(),
            multithread=True,
        )
        gateway.request_handler = self  # type: ignore[attr-defined]  # it logs the request
        gateway.run(self.server.get_app())  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("admin HTTPS %s: " + format, self.client_address[0], *args)


class _Connection:
    def __init__(self, sock: socket.socket, address: Any) -> None:
        self.sock = sock
        self.address = address
        self.deadline = time.monotonic() + _CONNECTION_DEADLINE_S


class HttpsServer:
    """An HTTPS WSGI server bound at construction, served by threads of its own.

    Raises OSError if ``host:port`` cannot be bound.
    """

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        host: str,
        port: int,
        *,
        name: str,
        threads: int,
        max_connections: int,
        max_request_bytes: int,
        context: ssl.SSLContext,
    ) -> None:
        self.name = name
        self._max_request_bytes = max_request_bytes
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family)
        self._listener.settimeout(_POLL_S)
        self.host = host
        self.port = int(self._listener.getsockname()[1])
        self._site = _Site(app, host, self.port)
        self._context = context
        self._stopping = threading.Event()
        self._at_limit = False
        self._slots = threading.BoundedSemaphore(max_connections)
        # Bounded by max_connections: a connection enters only with a slot.
        self._waiting: queue.Queue[_Connection] = queue.Queue()
        self._open: set[_Connection] = set()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept_loop, name=f"pybkx-{name}")]
        self._threads += [
            threading.Thread(target=self._work, name=f"pybkx-{name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.daemon = True

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            self._shut_overdue()
            try:
                sock, address = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stopping.is_set():
                    return
                logger.warning("%s: accept failed: %s", self.name, exc)
                self._stopping.wait(_POLL_S)  # not a fixed sleep: ends early at stop
                continue
            if not self._slots.acquire(blocking=False):
                if not self._at_limit:  # once per episode, not once per connection
                    logger.warning(
                        "%s: at its connection limit, closing new connections", self.name
                    )
                self._at_limit = True
                sock.close()
                continue
            self._at_limit = False
            conn = _Connection(sock, address)
            with self._lock:
                self._open.add(conn)
            self._waiting.put(conn)

    def _shut_overdue(self) -> None:
        """Shuts connections past their deadline: their worker's read or write ends."""
        now = time.monotonic()
        with self._lock:
            overdue = [c for c in self._open if c.deadline < now]
        for conn in overdue:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def _work(self) -> None:
        while not self._stopping.is_set():
            try:
                conn = self._waiting.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            try:
                self._serve(conn)
            finally:
                self._close(conn)

    def _serve(self, conn: _Connection) -> None:
        conn.sock.settimeout(_IDLE_TIMEOUT_S)
        try:
            tls = self._context.wrap_socket(conn.sock, server_side=True)
        except (OSError, ValueError) as exc:  # a failed handshake: no certificate, plain HTTP
            logger.info("%s: TLS handshake with %s failed: %s", self.name, conn.address, exc)
            return
        conn.sock = tls
        try:
            _Handler(tls, conn.address, self._site)  # type: ignore[arg-type]
        except OSError as exc:
            logger.info("%s: connection from %s ended: %s", self.name, conn.address, exc)
            return
        self._linger(tls)

    def _linger(self, sock: socket.socket) -> None:
        """Reads what the client still sends (a body the answer did not need, such as a 401's)
        until it closes, so that closing does not reset the connection before the client has
        read the answer. Bounded by ``_LINGER_S`` and by the largest request body."""
        deadline = time.monotonic() + _LINGER_S
        left = self._max_request_bytes + _LINGER_SLACK_BYTES
        with contextlib.suppress(OSError, ValueError):
            sock.shutdown(socket.SHUT_WR)  # also ends TLS: what follows is read raw
            while left > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                sock.settimeout(remaining)
                data = sock.recv(min(left, 65536))
                if not data:
                    break
                left -= len(data)

    def _close(self, conn: _Connection) -> None:
        with self._lock:
            if conn not in self._open:
                return
            self._open.discard(conn)
        with contextlib.suppress(OSError):
            conn.sock.close()
        self._slots.release()

    def stop(self) -> None:
        """Close the listening socket and every connection, stop the threads. Idempotent;
        bounded by a few seconds."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            open_now = list(self._open)
        for conn in open_now:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            logger.warning(
                "%s: threads still running after %.0fs: %s", self.name, _STOP_TIMEOUT_S, alive
            )
        while True:
            try:
                self._close(self._waiting.get_nowait())
            except queue.Empty:
                break
