"""HTTP plumbing of the admin server: a waitress WSGI server in a thread of its own with bounded
threads, connections and request bodies, and a small router that turns handlers' results and
errors into responses. Every failure becomes a status code and a JSON error, never a traceback.
It owns requests and responses; it never knows what an endpoint does.

Why waitress: a production WSGI server in pure Python with no dependencies, maintained by the
Pylons project, whose limits (worker threads, open connections, request body size, idle
timeout) are settings; the admin API is small and infrequent, so a thread pool serving WSGI fits
it better than an event loop or a framework. Waitress has no TLS: with ``httpServerTlsEnable``
the same Router is served by ``admin/https.py`` under the same limits.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

import waitress

from pybkx import errors

__all__ = ["HttpError", "HttpServer", "Request", "Response", "Router", "require"]

logger = logging.getLogger(__name__)

_STOP_TIMEOUT_S = 5.0
_IDLE_TIMEOUT_S = 30


class HttpError(Exception):
    """A request that cannot be served: its status and a one-line reason for the JSON body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    params: Mapping[str, str]
    body: bytes

    def param(self, name: str, default: str | None = None) -> str | None:
        return self.params.get(name, default)

    def int_param(self, name: str, default: int | None = None) -> int | None:
        """A whole-number query parameter. Raises HttpError 400 if it is not one."""
        raw = self.params.get(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise HttpError(400, f"{name} must be a whole number, got {raw!r}") from None

    def json_body(self) -> Any:
        """The body as JSON (None when empty). Raises HttpError 400 if it is not JSON."""
        if not self.body.strip():
            return None
        try:
            return json.loads(self.body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise HttpError(400, f"the request body is not JSON: {exc}") from None


@dataclass(frozen=True)
class Response:
    status: int = 200
    body: Any = None
    """JSON-encodable (sent as JSON), or ``str`` sent as text when ``content_type`` says so."""
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def text(cls, text: str, status: int = 200, content_type: str = "text/plain") -> Response:
        return cls(status, text, content_type)

    def encoded(self) -> bytes:
        if self.content_type == "application/json":
            return (json.dumps(self.body, indent=2) + "\n").encode()
        return str(self.body).encode()


Handler = Callable[[Request], Response]


def require(request: Request, *methods: str) -> None:
    """Raises HttpError 404 unless the request uses one of ``methods``: BookKeeper answers a
    method an endpoint does not support with 404."""
    if request.method not in methods:
        raise HttpError(404, f"{request.method} is not supported here; use {' or '.join(methods)}")


_METHODS = frozenset({"GET", "PUT", "POST", "DELETE", "HEAD"})
_WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def _error_status(exc: errors.BKException) -> int:
    """The status of a BookKeeper error a handler let through."""
    if isinstance(
        exc,
        errors.NoSuchLedgerExistsOnMetadataServerException
        | errors.NoSuchLedgerExistsException
        | errors.NoSuchEntryException
        | errors.BookieHandleNotAvailableException
        | errors.CookieNotFoundException,
    ):
        return 404
    if isinstance(exc, errors.IncorrectParameterException):
        return 400
    return 500


class Router:
    """A WSGI application dispatching ``path`` to a handler; the handler checks the method.

    BookKeeper answers a wrong method or a missing parameter with 404 and an unknown path with
    404; pybkx does the same, with a JSON body ``{"error": ...}``.
    """

    def __init__(
        self,
        routes: Mapping[str, Handler],
        max_body_bytes: int,
        write_token: str | None = None,
        basic_credentials: Iterable[str] = (),
    ) -> None:
        self._routes = dict(routes)
        self._max_body_bytes = max_body_bytes
        # With a token or basic-auth users, every request that changes something must carry
        # one of them (pybkx's httpServerAuthTokenPath and httpServerBasicAuthPath;
        # BookKeeper's admin API has neither).
        self._write_token = write_token.encode() if write_token else None
        self._basic = tuple(c.encode() for c in basic_credentials)

    @property
    def paths(self) -> list[str]:
        return sorted(self._routes)

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        response = self._respond(environ)
        body = response.encoded()
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(body)))]
        headers += list(response.headers.items())
        start_response(_status_line(response.status), headers)
        return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

    def _respond(self, environ: dict[str, Any]) -> Response:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        path = str(environ.get("PATH_INFO", "/")) or "/"
        if len(path) > 1:
            path = path.rstrip("/")
        try:
            if method not in _METHODS:
                raise HttpError(405, f"method {method} is not supported")
            handler = self._routes.get(path)
            if handler is None:
                raise HttpError(404, f"no endpoint {path}; see /api/v1 for the list")
            if method in _WRITE_METHODS and not self._authorized(environ):
                return self._unauthorized(f"{method} {path}")
            request = Request(
                method=method,
                path=path,
                params=dict(parse_qsl(str(environ.get("QUERY_STRING", "")))),
                body=self._body(environ),
            )
            return handler(request)
        except HttpError as exc:
            return Response(exc.status, {"error": str(exc)})
        except errors.BKException as exc:
            return Response(_error_status(exc), {"error": f"{type(exc).__name__}: {exc}"})
        except Exception as exc:
            logger.exception("admin API %s %s failed", method, path)
            return Response(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})

    def _authorized(self, environ: dict[str, Any]) -> bool:
        """True with neither a token nor basic-auth users, or when the request carries the
        bearer token or one user's ``user:password`` (compared in constant time, every user
        compared whatever matched)."""
        if self._write_token is None and not self._basic:
            return True
        scheme, _, given = str(environ.get("HTTP_AUTHORIZATION", "")).partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer" and self._write_token is not None:
            return hmac.compare_digest(given.strip().encode(), self._write_token)
        if scheme == "basic" and self._basic:
            try:
                credentials = base64.b64decode(given.strip(), validate=True)
            except (binascii.Error, ValueError):
                return False
            matches = [hmac.compare_digest(credentials, known) for known in self._basic]
            return any(matches)
        return False

    def _unauthorized(self, what: str) -> Response:
        """401 naming the schemes this server takes."""
        needs, challenges = [], []
        if self._write_token is not None:
            needs.append("Authorization: Bearer <token>")
            challenges.append('Bearer realm="pybkx admin"')
        if self._basic:
            needs.append("Authorization: Basic <user:password>")
            challenges.append('Basic realm="pybkx admin", charset="UTF-8"')
        return Response(
            401,
            {"error": f"{what} needs {' or '.join(needs)}"},
            headers={"WWW-Authenticate": ", ".join(challenges)},
        )

    def _body(self, environ: dict[str, Any]) -> bytes:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise HttpError(400, "bad Content-Length") from None
        if length > self._max_body_bytes:
            raise HttpError(413, f"request body over {self._max_body_bytes} bytes")
        stream = environ.get("wsgi.input")
        return stream.read(length) if stream is not None and length > 0 else b""


class HttpServer:
    """A waitress server bound at construction and served by a thread of its own.

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
    ) -> None:
        self.name = name
        self._server = waitress.create_server(
            app,
            host=host,
            port=port,
            threads=threads,
            connection_limit=max_connections,
            max_request_body_size=max_request_bytes,
            channel_timeout=_IDLE_TIMEOUT_S,
            ident="pybkx",
            clear_untrusted_proxy_headers=True,
        )
        self.host = host
        self.port = int(self._server.effective_port)
        self._thread = threading.Thread(target=self._run, name=f"pybkx-{name}", daemon=True)
        self._stopped = False

    def _run(self) -> None:
        try:
            self._server.run()
        except Exception:  # the loop ends when its sockets close; anything else is a bug
            logger.exception("%s stopped with an error", self.name)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Close the listening socket and every connection, stop the worker threads.
        Idempotent; bounded by a few seconds."""
        if self._stopped:
            return
        self._stopped = True
        server = self._server

        def close_all() -> None:  # runs in the server's loop thread
            for channel in list(server._map.values()):
                channel.close()

        with contextlib.suppress(OSError):  # the trigger is gone: the loop already ended
            server.trigger.pull_trigger(close_all)
        self._thread.join(_STOP_TIMEOUT_S)
        if self._thread.is_alive():
            logger.warning("%s: loop still running after %.0fs", self.name, _STOP_TIMEOUT_S)
        server.task_dispatcher.shutdown(timeout=_STOP_TIMEOUT_S)
