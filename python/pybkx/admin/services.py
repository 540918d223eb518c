"""The HTTP services a bookie runs beside its RPC server, as BookKeeper runs them: the admin
server (``httpServerEnabled``: every endpoint, ``/metrics`` included, published in the bookie's
registration as ``httpserver``), or else, when metrics are collected and
``prometheusStatsHttpEnable`` is on, a server for ``/metrics`` alone on
``prometheusStatsHttpPort``. The admin server speaks HTTPS when ``httpServerTlsEnable`` is
on (``/metrics`` alone stays plain, as in BookKeeper). It starts and stops them; it never
answers a request itself (the endpoints live in ``api_*``).
"""

from __future__ import annotations

import abc
import functools
import logging
import ssl
from collections.abc import Callable
from pathlib import Path

from pybkx.admin.api_autorecovery import autorecovery_routes
from pybkx.admin.api_bookie import bookie_routes
from pybkx.admin.api_ledgers import ledger_routes
from pybkx.admin.context import AdminContext
from pybkx.admin.http import HttpServer, Router
from pybkx.admin.https import HttpsServer
from pybkx.admin.tls import admin_tls_context
from pybkx.bookie import Bookie, BookieError, BookieService
from pybkx.config import ConfigError, ServerConfig
from pybkx.config.keystores import read_password
from pybkx.meta import Endpoint
from pybkx.tools.bookies import admin_caller

__all__ = ["AdminHttpService", "MetricsHttpService", "services_for"]

logger = logging.getLogger(__name__)


class _HttpService(abc.ABC):
    """One HTTP server over a set of routes made for the bookie it starts with."""

    name = "http"
    publish_as: str | None = None

    def __init__(self) -> None:
        self._server: HttpServer | HttpsServer | None = None
        self._context: AdminContext | None = None

    @property
    def port(self) -> int:
        """The bound port (differs from the configured one only for port 0)."""
        if self._server is None:
            raise BookieError(f"the {self.name} is not running")
        return self._server.port

    @abc.abstractmethod
    def _address(self, config: ServerConfig) -> tuple[str, int]:
        """Where to listen."""

    @abc.abstractmethod
    def _routes(self, ctx: AdminContext) -> Router:
        """The application to serve."""

    def start(self, bookie: Bookie) -> Endpoint | None:
        config = bookie.config
        host, port = self._address(config)
        tls = self._tls(config)
        ctx = AdminContext(bookie)
        try:
            server = self._server_for(ctx, config, host, port, tls)
        except OSError as exc:
            ctx.close()
            raise BookieError(
                f"cannot start the {self.name} on {host}:{port}: {exc.strerror or exc}"
            ) from None
        except BookieError:
            ctx.close()
            raise
        server.start()
        self._server, self._context = server, ctx
        scheme = "http" if tls is None else "https"
        logger.info("%s serving on %s://%s:%d", self.name, scheme, host, server.port)
        if self.publish_as is None:
            return None
        try:
            advertised = bookie.config.bookie_address(bookie.port).rpartition(":")[0]
        except ConfigError:
            advertised = host
        # BookKeeper publishes "http" even over TLS; pybkx says "https" so that its callers
        # know which to speak.
        return Endpoint(self.publish_as, server.port, advertised, scheme)

    def _tls(self, config: ServerConfig) -> ssl.SSLContext | None:
        """The TLS context this server uses (None: plain HTTP)."""
        return None

    def _server_for(
        self,
        ctx: AdminContext,
        config: ServerConfig,
        host: str,
        port: int,
        tls: ssl.SSLContext | None,
    ) -> HttpServer | HttpsServer:
        server: Callable[..., HttpServer | HttpsServer] = (
            HttpServer if tls is None else functools.partial(HttpsServer, context=tls)
        )
        return server(
            self._routes(ctx),
            host,
            port,
            name=self.name,
            threads=config.http_server_threads,
            max_connections=config.http_server_max_connections,
            max_request_bytes=config.http_server_max_request_bytes,
        )

    def stop(self) -> None:
        server, ctx = self._server, self._context
        self._server = self._context = None
        if server is not None:
            server.stop()
        if ctx is not None:
            ctx.close()


class AdminHttpService(_HttpService):
    """BookKeeper's admin HTTP API on ``httpServerHost:httpServerPort``."""

    name = "admin HTTP server"
    publish_as = "httpserver"

    def _address(self, config: ServerConfig) -> tuple[str, int]:
        return config.http_server_host, config.http_server_port

    def start(self, bookie: Bookie) -> Endpoint | None:
        """Start serving; then give the bookie's cross-replica checker the way to its peers'
        admin endpoints (the one pybkx's tools use), which starts its cycle."""
        endpoint = super().start(bookie)
        scrubber = bookie.scrubber
        store = bookie.metadata_store
        if scrubber is not None and scrubber.replicas is not None and store is not None:
            scrubber.replicas.use_peers(admin_caller(store))
        return endpoint

    def _tls(self, config: ServerConfig) -> ssl.SSLContext | None:
        """``httpServerTlsEnable`` and its stores. Raises BookieError naming the key of an
        unusable store."""
        try:
            return admin_tls_context(config)
        except ConfigError as exc:
            raise BookieError(str(exc)) from None

    def _routes(self, ctx: AdminContext) -> Router:
        routes = {**bookie_routes(ctx), **ledger_routes(ctx), **autorecovery_routes(ctx)}
        config = ctx.bookie.config
        return Router(
            routes,
            config.http_server_max_request_bytes,
            write_token=_write_token(config),
            basic_credentials=_basic_credentials(config),
        )


def _write_token(config: ServerConfig) -> str | None:
    """The token ``httpServerAuthTokenPath`` names (None: unset). Raises BookieError when the
    file cannot be read or holds no token: a token asked for is never silently dropped."""
    path = config.http_server_auth_token_path
    if path is None:
        return None
    try:
        token = read_password("httpServerAuthTokenPath", path)
    except ConfigError as exc:
        raise BookieError(str(exc)) from None
    if not token:
        raise BookieError(f"httpServerAuthTokenPath={path}: the file holds no token")
    return token


def _basic_credentials(config: ServerConfig) -> list[str]:
    """The ``user:password`` lines of ``httpServerBasicAuthPath`` (none: unset). Blank lines
    and ``#`` comments are skipped. Raises BookieError when the file cannot be read, a line is
    not ``user:password`` or no line is: users asked for are never silently dropped."""
    path = config.http_server_basic_auth_path
    if path is None:
        return []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BookieError(f"httpServerBasicAuthPath={path}: cannot read it: {exc}") from None
    credentials = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, colon, password = line.partition(":")
        if not colon or not user or not password:
            raise BookieError(f"httpServerBasicAuthPath={path}: line {number} is not user:password")
        credentials.append(line)
    if not credentials:
        raise BookieError(f"httpServerBasicAuthPath={path}: the file holds no user:password")
    return credentials


class MetricsHttpService(_HttpService):
    """``/metrics`` alone on ``prometheusStatsHttpAddress:prometheusStatsHttpPort``."""

    name = "Prometheus metrics server"

    def _address(self, config: ServerConfig) -> tuple[str, int]:
        return config.prometheus_stats_http_address, config.prometheus_stats_http_port

    def _routes(self, ctx: AdminContext) -> Router:
        routes = bookie_routes(ctx)
        return Router({"/metrics": routes["/metrics"]}, 0)


def services_for(config: ServerConfig) -> list[BookieService]:
    """The HTTP services a bookie with ``config`` runs, as BookKeeper decides them."""
    if config.http_server_enabled:
        return [AdminHttpService()]
    if config.collects_metrics and config.prometheus_stats_http_enable:
        return [MetricsHttpService()]
    return []
