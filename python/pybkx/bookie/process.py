"""The bookie process's life: start (cluster, storage, server, disk checker, GC, the services
beside it, registration), run until a signal or a halt, stop within its budget. It orders the
steps; it never reads or writes entries, frames or storage files, and leaves the read-only mode
to ``readonly.py``, the metadata steps to ``registration.py``, opening and closing the storage
and the server to ``serving.py``."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Protocol

from pybkx import errors
from pybkx._core import BookieServer, LedgerStorage
from pybkx.bookie.disks import DiskChecker, DiskThresholds
from pybkx.bookie.events import log_event
from pybkx.bookie.exceptions import BookieError
from pybkx.bookie.gc import GarbageCollector
from pybkx.bookie.readonly import ReadOnlyMode
from pybkx.bookie.registration import (
    Registration,
    StartInterrupted,
    StartWait,
    close_store_quietly,
    join_cluster,
    run_bounded,
)
from pybkx.bookie.scrub import ScrubRepairer, check_consistency_on_startup
from pybkx.bookie.serving import (
    close_storage,
    close_storage_after_failure,
    counters,
    free_port,
    open_storage,
    start_server,
    stop_server,
)
from pybkx.bookie.tls_reload import TlsReloader
from pybkx.config import ConfigError, ServerConfig
from pybkx.config.jaas import BookieSasl
from pybkx.config.security import (
    authorized_roles,
    bookie_sasl_policy,
)
from pybkx.config.tls import ServerTlsMaterial, server_tls_material
from pybkx.meta import Endpoint, MetadataStore

__all__ = ["DRAIN_TIMEOUT_MS", "HALT_EXIT_CODE", "Bookie", "BookieError", "BookieService"]

logger = logging.getLogger(__name__)

HALT_EXIT_CODE = 3
"""``run()``'s exit code when the bookie stopped by itself (BookKeeper's BOOKIE_EXCEPTION)."""

DRAIN_TIMEOUT_MS = 10_000
"""How long a stopping bookie lets in-flight requests finish before closing connections."""

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class BookieService(Protocol):
    """Something that runs beside a bookie (its admin HTTP server, say): started once the bookie
    serves and before it registers, stopped before it stops serving."""

    name: str

    def start(self, bookie: Bookie) -> Endpoint | None:
        """Start; return the endpoint to publish in the bookie's registration, if any. Raises
        BookieError (the bookie then stops and fails to start)."""

    def stop(self) -> None:
        """Stop; idempotent, never raises."""


@dataclass(frozen=True)
class _Running:
    """What a running bookie holds: put in place whole by the start, taken whole by the stop."""

    storage: LedgerStorage
    server: BookieServer
    mode: ReadOnlyMode
    disks: DiskChecker
    registration: Registration | None
    """None when standalone."""
    gc: GarbageCollector | None
    """None when standalone."""
    tls: TlsReloader | None
    """None without TLS."""
    scrub: ScrubRepairer
    """Repairs what the storage's scrubber finds (only logs it when standalone)."""


class Bookie:
    """A bookie process: cookie check, ledger storage, the V2 server over it and its
    registration; stopped on SIGTERM/SIGINT.

    ``run()`` is the whole life of ``pybkx bookie``; ``start()``/``stop()`` (or ``with``) drive it
    step by step. With ``metadataServiceUri`` (or the legacy ``zkServers``) the bookie joins that
    cluster, which must be initialised (``pybkx shell initnewcluster``): it checks or stamps its
    cookie before opening the storage, starts its ``services`` (the admin HTTP server, say) once
    it listens, and registers (writable, or read-only with ``forceReadOnlyBookie``) with the
    endpoints they publish. Without one it serves standalone: no cookie, no registration.
    """

    def __init__(
        self,
        config: ServerConfig,
        *,
        drain_timeout_ms: int = DRAIN_TIMEOUT_MS,
        services: Sequence[BookieService] = (),
    ) -> None:
        self.config = config
        self.drain_timeout_ms = drain_timeout_ms
        self.services = tuple(services)
        self._running: _Running | None = None
        self._bookie_id: str | None = None
        self._started_services: list[BookieService] = []
        self._stopping = False
        # Serialises the start's and the stop's swaps of what the bookie holds.
        self._state_lock = threading.Lock()
        self._stop_lock = threading.Lock()
        # Set when the bookie must stop by itself (disks full with readOnlyModeEnabled=false).
        self._halt = threading.Event()
        self._halt_reason = ""
        # While run() serves: set by a stop signal or a halt to end its wait.
        self._run_wake: threading.Event | None = None
        # Set by run()'s signal handler: a start still waiting for the metadata store gives up.
        self._start_cancel = threading.Event()

    # --- state

    @property
    def running(self) -> bool:
        return self._running is not None

    @property
    def storage(self) -> LedgerStorage:
        return self._parts().storage

    @property
    def server(self) -> BookieServer:
        return self._parts().server

    @property
    def metadata_store(self) -> MetadataStore | None:
        """The cluster's metadata store while running with one; None when standalone."""
        running = self._running
        if running is None or running.registration is None:
            return None
        return running.registration.store

    @property
    def port(self) -> int:
        """The bound port (differs from ``bookiePort`` only for port 0)."""
        return self.server.port

    @property
    def bookie_id(self) -> str:
        if self._bookie_id is None:
            raise BookieError("the bookie is not running")
        return self._bookie_id

    @property
    def read_only(self) -> bool:
        """True while normal adds are refused (EREADONLY). Raises BookieError if not running."""
        return self.server.is_read_only()

    @property
    def shutting_down(self) -> bool:
        """True once ``stop()`` began."""
        return self._stopping

    @property
    def disk_checker(self) -> DiskChecker | None:
        """The disk checker while running."""
        running = self._running
        return None if running is None else running.disks

    @property
    def available_for_high_priority_writes(self) -> bool:
        """BookKeeper's ``availableForHighPriorityWrites``: a writable bookie, or a read-only
        one whose disks still have ``minUsableSizeForHighPriorityWrites`` free."""
        running = self._running
        if running is None or self._stopping:
            return False
        return not running.server.is_read_only() or running.server.high_priority_writes()

    @property
    def halt_reason(self) -> str:
        """Why the bookie stopped by itself ("" if it did not)."""
        return self._halt_reason

    @property
    def garbage_collector(self) -> GarbageCollector | None:
        """The collector of ledgers whose metadata is gone; None when standalone."""
        running = self._running
        return None if running is None else running.gc

    @property
    def scrubber(self) -> ScrubRepairer | None:
        """The repairer of the scrubber's findings (and runner of scrubs asked for) while
        running."""
        running = self._running
        return None if running is None else running.scrub

    def _parts(self) -> _Running:
        running = self._running
        if running is None:
            raise BookieError("the bookie is not running")
        return running

    # --- life cycle

    def start(self) -> None:
        """Check the cookie, open the storage (replaying its journal), start serving, register.

        Raises BookieError with one line for the operator: bad identity, unreachable or
        uninitialised metadata store, a cookie mismatch (the line starts with
        ``InvalidCookieException``), a JAAS file SASL cannot use, security asked for that pybkx
        does not implement (the line names the key: ``tlsProviderFactoryClass``,
        ``bookieAuthProviderFactoryClass``, ...), storage, listening or service failures.
        Nothing stays open after a failed start.
        """
        if self._running is not None:
            raise BookieError("the bookie is already running")
        config = self.config
        try:
            host, port = config.listening_address(), config.bookie_port
            config.bookie_address(config.bookie_port)  # refuse a bad identity before any I/O
            # Read the TLS stores before anything opens: a missing store or a bad password
            # stops the start here.
            tls = server_tls_material(config)
            roles = authorized_roles(config)
            # The JAAS file's users: a missing file or section stops the start here.
            sasl = bookie_sasl_policy(config)
        except ConfigError as exc:
            raise BookieError(str(exc)) from None
        self._note_what_is_not_implemented()
        self._stopping = False
        wait = StartWait(config.zk_timeout_ms, self._start_cancel)

        uri = config.metadata_uri()
        store: MetadataStore | None = None
        bookie_id: str | None = None
        if uri is not None:
            if port == 0:  # the cookie names the port: fix it now
                port = free_port(host)
            bookie_id = self._identity(port)
            try:
                store = join_cluster(config, uri, bookie_id, wait)
            except StartInterrupted:
                log_event(
                    logger,
                    logging.WARNING,
                    "start interrupted by a stop request (cookie not checked)",
                )
                return
        running = self._serve(host, port, store, bookie_id, (tls, roles, sasl))
        if self._announce(running, wait):
            running.disks.start()
            self._log_serving(running, f"{host}:{running.server.port}", uri)

    def _serve(
        self,
        host: str,
        port: int,
        store: MetadataStore | None,
        bookie_id: str | None,
        security: tuple[ServerTlsMaterial | None, tuple[str, ...] | None, BookieSasl | None],
    ) -> _Running:
        """Open the storage, listen (with ``security``'s TLS material for START_TLS, its
        authorized roles and its SASL users), check the disks, start the collector; put it all
        in place. Raises BookieError (what was opened, ``store`` too, is closed again)."""
        tls, roles, sasl = security
        try:
            storage = open_storage(self.config)
            check_consistency_on_startup(storage, self.config)
            server = start_server(storage, self.config, host, port, tls, roles, sasl)
        except BaseException:
            if store is not None:
                close_store_quietly(store)
            raise
        if bookie_id is None:
            bookie_id = self._standalone_identity(host, server.port)
        registration = (
            None if store is None else Registration(store, self.config, bookie_id, server.port)
        )
        mode = ReadOnlyMode(self.config, server, bookie_id, registration, self._request_halt)
        try:
            disks = self._first_disk_check(storage, mode)
        except BookieError:
            with contextlib.suppress(Exception):
                server.stop(0)
            close_storage_after_failure(storage)
            if store is not None:
                close_store_quietly(store)
            raise
        mode.restore_persisted()
        gc = None if store is None else self._start_gc(storage, store, bookie_id)
        reloader = None if tls is None else TlsReloader(server, self.config, tls)
        scrub = ScrubRepairer(storage, store, self.config, bookie_id)
        scrub.start()
        running = _Running(storage, server, mode, disks, registration, gc, reloader, scrub)
        with self._state_lock:
            self._running = running
            self._bookie_id = bookie_id
        return running

    def _first_disk_check(self, storage: LedgerStorage, mode: ReadOnlyMode) -> DiskChecker:
        """The disk checker (not started yet), its first check made: with full disks the bookie
        starts read-only. Raises BookieError when it may not (``readOnlyModeEnabled=false``)."""
        config = self.config
        disks = DiskChecker(
            storage,
            DiskThresholds(
                threshold=config.disk_usage_threshold,
                warn=config.disk_usage_warn_threshold,
                lwm=config.disk_usage_lwm,
                min_usable_for_high_priority=config.high_priority_min_free_bytes,
                any_disk_full=config.read_only_mode_on_any_disk_full_enabled,
            ),
            config.disk_check_interval_ms,
            mode.on_disk_verdict,
        )
        try:
            first = disks.check()
        except errors.BKException as exc:
            first = None
            log_event(
                logger, logging.ERROR, "disk check failed", error=f"{type(exc).__name__}: {exc}"
            )
        mode.enter_if_disks_full(first)
        return disks

    def _start_gc(
        self, storage: LedgerStorage, store: MetadataStore, bookie_id: str
    ) -> GarbageCollector:
        config = self.config
        gc = GarbageCollector(
            storage,
            store,
            bookie_id=bookie_id,
            over_replicated_interval_s=config.gc_overreplicated_ledger_wait_time_ms / 1000,
        )
        gc.start_periodic(config.gc_wait_time_ms / 1000.0)
        return gc

    def _announce(self, running: _Running, wait: StartWait) -> bool:
        """Start the services, then register with the endpoints they publish. False when a stop
        signal arrived meanwhile (``run()`` stops the bookie next; the abandoned registration
        ends with the store's session when ``stop()`` closes it). Raises BookieError (the bookie
        is stopped again)."""
        try:
            endpoints = self._start_services()
            if running.registration is not None:
                running.registration.endpoints = endpoints
                running.mode.register(wait)
        except BookieError:
            with contextlib.suppress(BookieError):
                self.stop()
            raise
        except StartInterrupted:
            log_event(
                logger, logging.WARNING, "start interrupted by a stop request (not registered)"
            )
            return False
        return True

    def _log_serving(self, running: _Running, listen: str, uri: str | None) -> None:
        config = self.config
        log_event(
            logger,
            logging.INFO,
            "bookie serving",
            bookie_id=self._bookie_id,
            listen=listen,
            read_only=running.server.is_read_only(),
            ledgers=counters(running.storage).get("bookie_gc_ACTIVE_LEDGER_TOTAL", "?"),
            max_frame_size=config.netty_max_frame_size_bytes,
            max_pending_adds=config.max_pending_add_requests_per_thread,
            max_pending_reads=config.max_pending_read_requests_per_thread,
            max_batch_read_size=config.max_batch_read_size_bytes,
            metadata=uri or "(standalone)",
            registered="yes" if running.registration is not None else "no",
            config=config.source,
        )

    def set_read_only(self, read_only: bool) -> None:
        """Enter (True) or leave (False) read-only mode: the server refuses or accepts normal
        adds again, and the registration moves to ``available/readonly`` or back.

        Idempotent. Raises BookieError if not running, when leaving is forbidden by
        ``forceReadOnlyBookie``, when entering is forbidden by ``readOnlyModeEnabled=false``, or
        when the registration cannot be moved (the server mode is then restored).
        """
        self._parts().mode.set(read_only)

    def _request_halt(self, reason: str) -> None:
        """Stop the bookie from inside (as BookKeeper's shutdown on a fatal condition): ``run()``
        returns; a bookie driven by ``start()``/``stop()`` is stopped on a thread of its own."""
        if self._halt.is_set():
            return
        self._halt_reason = reason
        log_event(logger, logging.ERROR, reason, bookie_id=self._bookie_id)
        self._halt.set()
        wake = self._run_wake
        if wake is not None:
            wake.set()
        else:
            threading.Thread(target=self._halt_stop, name="pybkx-halt", daemon=True).start()

    def _halt_stop(self) -> None:
        try:
            self.stop()
        except BookieError as exc:
            log_event(logger, logging.ERROR, "stopping after a halt failed", error=str(exc))

    def stop(self) -> None:
        """Unregister, stop serving (draining in-flight requests), close the storage (which
        checkpoints), then close the metadata store.

        Bounded: the metadata store steps and the drain share ``bookieShutdownTimeoutMs``; a
        metadata step that does not finish in its share is abandoned on a daemon thread (with
        ZooKeeper unreachable the registration ends with the session instead), so the bookie
        exits even when the store never answers. The storage checkpoint is never cut short.

        Idempotent. Raises BookieError if the storage could not be closed cleanly (the metadata
        store is closed anyway); a failed unregistration is only logged, since the registration
        ends with the store's session.
        """
        with self._stop_lock:  # a second caller waits for a stop in progress to finish
            self._stop()

    def _stop(self) -> None:
        self._stopping = True
        budget_s = self.config.bookie_shutdown_timeout_ms / 1000.0
        deadline = time.monotonic() + budget_s
        with self._state_lock:
            running, self._running = self._running, None
        if running is None:
            self._stop_services(budget_s / 4)
            return
        running.mode.close()  # a move in progress ends first; none after
        running.disks.stop()
        if running.tls is not None:
            running.tls.stop()
        if not running.scrub.stop(budget_s / 8):
            log_event(logger, logging.WARNING, "a scrub repair is still running at the stop")
        if running.gc is not None and not running.gc.stop_periodic(budget_s / 4):
            log_event(
                logger, logging.WARNING, "a garbage collection pass is still running at the stop"
            )
        registration = running.registration
        try:
            if registration is not None:
                registration.unregister(budget_s / 3)
            self._stop_services(budget_s / 4)
            # Keep a quarter of the budget for closing the metadata store.
            left_ms = int((deadline - time.monotonic() - budget_s / 4) * 1000)
            stop_server(running.server, max(0, min(self.drain_timeout_ms, left_ms)))
            close_storage(running.storage)
        finally:
            if registration is not None:
                registration.close(max(budget_s / 4, deadline - time.monotonic()))

    def run(self) -> int:
        """Start, serve until SIGTERM or SIGINT, stop; return the exit code (0, or
        ``HALT_EXIT_CODE`` when the bookie stopped by itself).

        Must run in the main thread (signal handlers). Raises BookieError on a failed start or
        stop; a signal that arrives during the start stops the bookie right after it.
        """
        wake = threading.Event()
        received: list[str] = []
        self._start_cancel.clear()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if received:
                log_event(logger, logging.WARNING, "already stopping", signal=name)
                return
            received.append(name)
            wake.set()
            self._start_cancel.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
        self._run_wake = wake
        try:
            self.start()
            wake.wait()  # a signal (its handler runs on this thread) or a halt sets it
            if received:
                log_event(logger, logging.INFO, "stop requested", signal=received[0])
        finally:
            self._run_wake = None
            try:
                self.stop()
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        log_event(logger, logging.INFO, "bookie stopped", bookie_id=self._bookie_id)
        return HALT_EXIT_CODE if self._halt.is_set() else 0

    def __enter__(self) -> Bookie:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- helpers

    def _note_what_is_not_implemented(self) -> None:
        """One line per BookKeeper setting pybkx takes differently, with what it does instead."""
        for note in self.config.notes():
            logger.warning("%s", note)

    def _start_services(self) -> tuple[Endpoint, ...]:
        """Start the services in order; return the endpoints they publish (they join the
        registration). Raises BookieError (those already started are stopped again)."""
        endpoints: list[Endpoint] = []
        for service in self.services:
            try:
                endpoint = service.start(self)
            except BookieError:
                self._stop_services(self.config.bookie_shutdown_timeout_ms / 4000.0)
                raise
            self._started_services.append(service)
            if endpoint is not None:
                endpoints.append(endpoint)
        return tuple(endpoints)

    def _stop_services(self, timeout_s: float) -> None:
        """Stop the started services, last first, within ``timeout_s`` together: a service
        whose stop waits on an unreachable metadata store (AutoRecovery's threads in a
        ZooKeeper retry) is left behind on a daemon thread, not waited for."""
        deadline = time.monotonic() + timeout_s
        while self._started_services:
            service = self._started_services.pop()

            def stop(service: BookieService = service) -> None:
                try:
                    service.stop()
                except Exception as exc:  # a service must not keep the bookie from stopping
                    log_event(
                        logger,
                        logging.ERROR,
                        "stopping a service failed",
                        service=service.name,
                        error=f"{type(exc).__name__}: {exc}",
                    )

            # At least a second each: an HTTP server's stop waits for its loop's next poll.
            run_bounded(f"stopping {service.name}", stop, max(1.0, deadline - time.monotonic()))

    def _identity(self, port: int) -> str:
        """``bookieId`` if configured, else ``host:port`` (BookKeeper's address rule)."""
        try:
            return self.config.bookie_identity(port)
        except ConfigError as exc:
            raise BookieError(str(exc)) from None

    def _standalone_identity(self, host: str, port: int) -> str:
        """The identity once the server listens (a standalone bookie checked no cookie)."""
        try:
            return self.config.bookie_identity(port)
        except ConfigError:  # resolution changed since the start's check; keep serving
            return f"{host}:{port}"
