"""The bookie process: cookie check, ledger storage, the Rust server, registration, stop.
It decides, logs and reports; it must never read or write entries, frames or storage files."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType
from typing import Protocol, TypeVar

from pybkx import errors
from pybkx._core import BookieServer, LedgerStorage
from pybkx.bookie.cookies import check_and_stamp_cookie
from pybkx.bookie.disks import DiskChecker, DiskThresholds, DiskVerdict
from pybkx.bookie.gc import GarbageCollector
from pybkx.bookie.status import read_status, write_status
from pybkx.config import ConfigError, ServerConfig
from pybkx.meta import BookieServiceInfo, Endpoint, MetadataStore, open_metadata_store

__all__ = ["DRAIN_TIMEOUT_MS", "HALT_EXIT_CODE", "Bookie", "BookieError", "BookieService"]

logger = logging.getLogger(__name__)

HALT_EXIT_CODE = 3
"""``run()``'s exit code when the bookie stopped by itself (BookKeeper's BOOKIE_EXCEPTION)."""

DRAIN_TIMEOUT_MS = 10_000
"""How long a stopping bookie lets in-flight requests finish before closing connections."""

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_SIGNAL_POLL_S = 0.5
#: The longest a failed start waits for the metadata store to close.
_CLOSE_AFTER_FAILURE_S = 5.0
#: How often a start waiting for the metadata store looks for a stop signal.
_START_POLL_S = 0.05


_T = TypeVar("_T")


class _StartInterrupted(Exception):
    """A stop signal arrived while the start waited for the metadata store."""


class BookieError(Exception):
    """The bookie could not start or stop cleanly; the message is one line for the operator."""


class BookieService(Protocol):
    """Something that runs beside a bookie (its admin HTTP server, say): started once the bookie
    serves and before it registers, stopped before it stops serving."""

    name: str

    def start(self, bookie: Bookie) -> Endpoint | None:
        """Start; return the endpoint to publish in the bookie's registration, if any. Raises
        BookieError (the bookie then stops and fails to start)."""

    def stop(self) -> None:
        """Stop; idempotent, never raises."""


def _event(level: int, event: str, /, **fields: object) -> None:
    """Log ``event key=value ...``; the fields also ride on the record as ``record.fields``."""

    def text(value: object) -> str:
        if isinstance(value, list | tuple):
            return ",".join(str(v) for v in value)
        s = str(value)
        return repr(s) if not s or any(c.isspace() for c in s) else s

    pairs = "".join(f" {key}={text(value)}" for key, value in fields.items())
    logger.log(level, "%s%s", event, pairs, extra={"event": event, "fields": fields})


def _stats(source: BookieServer | LedgerStorage) -> dict[str, int]:
    """Counters for a log line; never fails (a closed object may refuse)."""
    try:
        return dict(source.stats())
    except Exception:
        return {}


def _pick_port(host: str) -> int:
    """A port free on ``host`` right now (for ``bookiePort=0``: the bookie id needs the port
    before the server starts). Raises BookieError."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
            return port
    except OSError as exc:
        raise BookieError(f"cannot listen on {host}:0: {exc.strerror or exc}") from None


def _bounded(what: str, step: Callable[[], object], timeout_s: float) -> bool:
    """Run ``step`` on a daemon thread and wait at most ``timeout_s`` for it; True if it
    finished without raising. A failure or a timeout is logged, never raised: a stopping bookie
    must not wait on an unreachable metadata store (the abandoned thread dies with the process).
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            step()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"pybkx-stop-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        _event(
            logging.WARNING,
            f"{what} did not finish in time; going on without it",
            timeout_ms=int(timeout_s * 1000),
        )
        return False
    if failure:
        exc = failure[0]
        _event(logging.ERROR, f"{what} failed", error=f"{type(exc).__name__}: {exc}")
        return False
    return True


def _close_store_quietly(store: MetadataStore) -> None:
    """Close after a failed start: bounded, logged (a store that stopped answering must not
    keep the bookie from exiting)."""
    _bounded("closing metadata store", store.close, _CLOSE_AFTER_FAILURE_S)


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
        self._storage: LedgerStorage | None = None
        self._server: BookieServer | None = None
        self._store: MetadataStore | None = None
        self._gc: GarbageCollector | None = None
        self._bookie_id: str | None = None
        self._registered = False
        self._endpoints: tuple[Endpoint, ...] = ()
        self._started_services: list[BookieService] = []
        self._stopping = False
        # Serialises read-only moves with stop(): the server mode and the registration move
        # together.
        self._state_lock = threading.Lock()
        self._stop_lock = threading.Lock()
        self._disks: DiskChecker | None = None
        # Read-only because the disk checker found the disks full (it alone turns it back).
        self._disk_read_only = False
        # The mode the registration shows (None: not registered); a failed move is retried.
        self._registered_read_only: bool | None = None
        # Set when the bookie must stop by itself (disks full with readOnlyModeEnabled=false).
        self._halt = threading.Event()
        self._halt_reason = ""
        self._in_run = False
        # Set by run()'s signal handler: a start still waiting for the metadata store gives up.
        self._start_cancel = threading.Event()

    # --- state

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def storage(self) -> LedgerStorage:
        if self._storage is None:
            raise BookieError("the bookie is not running")
        return self._storage

    @property
    def server(self) -> BookieServer:
        if self._server is None:
            raise BookieError("the bookie is not running")
        return self._server

    @property
    def metadata_store(self) -> MetadataStore | None:
        """The cluster's metadata store while running with one; None when standalone."""
        return self._store

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
        return self._disks

    @property
    def available_for_high_priority_writes(self) -> bool:
        """BookKeeper's ``availableForHighPriorityWrites``: a writable bookie, or a read-only
        one whose disks still have ``minUsableSizeForHighPriorityWrites`` free."""
        server = self._server
        if server is None or self._stopping:
            return False
        return not server.is_read_only() or server.high_priority_writes()

    @property
    def halt_reason(self) -> str:
        """Why the bookie stopped by itself ("" if it did not)."""
        return self._halt_reason

    @property
    def garbage_collector(self) -> GarbageCollector | None:
        """The collector of ledgers whose metadata is gone; None when standalone."""
        return self._gc

    # --- life cycle

    def start(self) -> None:
        """Check the cookie, open the storage (replaying its journal), start serving, register.

        Raises BookieError with one line for the operator: bad identity, unreachable or
        uninitialised metadata store, a cookie mismatch (the line starts with
        ``InvalidCookieException``), storage, listening or service failures. Nothing stays open
        after a failed start.
        """
        if self._server is not None:
            raise BookieError("the bookie is already running")
        config = self.config
        try:
            host, port = config.listening_address(), config.bookie_port
            config.bookie_address(config.bookie_port)  # refuse a bad identity before any I/O
        except ConfigError as exc:
            raise BookieError(str(exc)) from None
        self._note_what_is_not_implemented()
        self._stopping = False

        uri = config.metadata_uri()
        store: MetadataStore | None = None
        bookie_id: str | None = None
        if uri is not None:
            if port == 0:  # the cookie names the port: fix it now
                port = _pick_port(host)
            bookie_id = self._identity(port)
            try:
                store = self._join_cluster(uri, bookie_id)
            except _StartInterrupted:
                _event(logging.WARNING, "start interrupted by a stop request (cookie not checked)")
                return
        try:
            storage = self._open_storage()
            server = self._start_server(storage, host, port)
        except BaseException:
            if store is not None:
                _close_store_quietly(store)
            raise

        registration_error: BookieError | None = None
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
            self._on_disk_verdict,
        )
        try:
            first = disks.check()
        except errors.BKException as exc:
            first = None
            _event(logging.ERROR, "disk check failed", error=f"{type(exc).__name__}: {exc}")
        if first is not None and not first.writable:
            if not config.read_only_mode_enabled:
                with contextlib.suppress(Exception):
                    server.stop(0)
                self._close_storage_after_failure(storage)
                if store is not None:
                    _close_store_quietly(store)
                raise BookieError(
                    "no writable ledger directory (disks past diskUsageThreshold) and "
                    "readOnlyModeEnabled=false"
                )
            server.set_read_only(True)
            server.set_high_priority_writes(first.high_priority_writes)
            self._disk_read_only = True
            _event(logging.WARNING, "disks full: starting read-only")
        self._restore_status(server)
        with self._state_lock:
            self._disks = disks
            self._storage, self._server, self._store = storage, server, store
            if bookie_id is None:
                try:
                    bookie_id = config.bookie_identity(server.port)
                except ConfigError:  # resolution changed since the check above; keep serving
                    bookie_id = f"{host}:{server.port}"
            self._bookie_id = bookie_id
            if store is not None:
                self._gc = GarbageCollector(
                    storage,
                    store,
                    bookie_id=bookie_id,
                    over_replicated_interval_s=config.gc_overreplicated_ledger_wait_time_ms / 1000,
                )
                self._gc.start_periodic(config.gc_wait_time_ms / 1000.0)
        try:
            self._start_services()
        except BookieError as exc:
            registration_error = exc
        if registration_error is None and store is not None:
            with self._state_lock:
                try:
                    self._register(store, server.is_read_only(), during_start=True)
                except BookieError as exc:
                    registration_error = exc
                except _StartInterrupted:
                    # run() stops the bookie next; the abandoned registration ends with the
                    # store's session when stop() closes it.
                    _event(logging.WARNING, "start interrupted by a stop request (not registered)")
                    return
        if registration_error is not None:
            with contextlib.suppress(BookieError):
                self.stop()
            raise registration_error
        disks.start()
        _event(
            logging.INFO,
            "bookie serving",
            bookie_id=self._bookie_id,
            listen=f"{host}:{server.port}",
            read_only=server.is_read_only(),
            ledgers=_stats(storage).get("bookie_gc_ACTIVE_LEDGER_TOTAL", "?"),
            max_frame_size=config.netty_max_frame_size_bytes,
            max_pending_adds=config.max_pending_add_requests_per_thread,
            max_pending_reads=config.max_pending_read_requests_per_thread,
            max_batch_read_size=config.max_batch_read_size_bytes,
            metadata=uri or "(standalone)",
            registered="yes" if store is not None else "no",
            config=config.source,
        )

    def set_read_only(self, read_only: bool) -> None:
        """Enter (True) or leave (False) read-only mode: the server refuses or accepts normal
        adds again, and the registration moves to ``available/readonly`` or back.

        Idempotent. Raises BookieError if not running, when leaving is forbidden by
        ``forceReadOnlyBookie``, when entering is forbidden by ``readOnlyModeEnabled=false``, or
        when the registration cannot be moved (the server mode is then restored).
        """
        with self._state_lock:
            server = self.server
            if server.is_read_only() == read_only:
                return
            if not read_only and self.config.force_read_only_bookie:
                raise BookieError("forceReadOnlyBookie=true: the bookie stays read-only")
            if read_only and not self.config.read_only_mode_enabled:
                raise BookieError("readOnlyModeEnabled=false: the bookie cannot go read-only")
            server.set_read_only(read_only)
            if self._store is not None and self._registered:
                try:
                    self._register(self._store, read_only)
                except BookieError:
                    server.set_read_only(not read_only)
                    raise
            self._disk_read_only = False  # an operator's choice: the disk checker keeps it
            self._persist_status(read_only, manual=True)
            _event(
                logging.INFO,
                "bookie is read-only" if read_only else "bookie is writable",
                bookie_id=self._bookie_id,
            )

    def _restore_status(self, server: BookieServer) -> None:
        """With ``persistBookieStatusEnabled``, start read-only when the persisted state says so
        (as BookKeeper's state manager; ``forceReadOnlyBookie`` already decided otherwise). A
        state the disk checker set may be undone by it once the disks have room; an operator's
        stays until an operator changes it."""
        config = self.config
        if not config.persist_bookie_status_enabled or config.force_read_only_bookie:
            return
        saved = read_status(config.ledger_directories)
        if saved is None or not saved.read_only or not config.read_only_mode_enabled:
            return
        server.set_read_only(True)
        self._disk_read_only = not saved.manual
        _event(
            logging.WARNING,
            "starting read-only as persisted in BOOKIE_STATUS",
            set_by="operator" if saved.manual else "disk checker",
        )

    def _persist_status(self, read_only: bool, manual: bool) -> None:
        """Record a change of state with ``persistBookieStatusEnabled`` (best effort, logged)."""
        if self.config.persist_bookie_status_enabled:
            write_status(self.config.ledger_directories, read_only, manual)

    def _on_disk_verdict(self, verdict: DiskVerdict) -> None:
        """Act on a disk check (on the checker's thread): turn read-only when the disks are full
        (or stop, with ``readOnlyModeEnabled=false``), writable again when they have room and
        the checker was what made the bookie read-only. A registration that could not be moved
        is moved at a later check. Never raises."""
        halt = ""
        with self._state_lock:
            server = self._server
            if server is None or self._stopping:
                return
            server.set_high_priority_writes(verdict.high_priority_writes)
            read_only = server.is_read_only()
            if not verdict.writable and not read_only:
                if not self.config.read_only_mode_enabled:
                    halt = (
                        "every ledger directory is full and readOnlyModeEnabled=false: "
                        "shutting down"
                    )
                else:
                    server.set_read_only(True)
                    self._disk_read_only = True
                    self._persist_status(True, manual=False)
                    _event(
                        logging.WARNING,
                        "disks full: bookie is read-only",
                        bookie_id=self._bookie_id,
                        writable_dirs=verdict.writable_dirs,
                        high_priority_writes=verdict.high_priority_writes,
                    )
            elif (
                verdict.writable
                and read_only
                and self._disk_read_only
                and not self.config.force_read_only_bookie
            ):
                server.set_read_only(False)
                self._disk_read_only = False
                self._persist_status(False, manual=False)
                _event(
                    logging.INFO,
                    "disks have room again: bookie is writable",
                    bookie_id=self._bookie_id,
                    writable_dirs=verdict.writable_dirs,
                )
            wanted = server.is_read_only()
            if (
                not halt
                and self._store is not None
                and self._registered
                and self._registered_read_only != wanted
            ):
                with contextlib.suppress(BookieError):  # logged; retried at the next check
                    self._register(self._store, wanted)
        if halt:
            self._request_halt(halt)

    def _request_halt(self, reason: str) -> None:
        """Stop the bookie from inside (as BookKeeper's shutdown on a fatal condition): ``run()``
        returns; a bookie driven by ``start()``/``stop()`` is stopped on a thread of its own."""
        if self._halt.is_set():
            return
        self._halt_reason = reason
        _event(logging.ERROR, reason, bookie_id=self._bookie_id)
        self._halt.set()
        if not self._in_run:
            threading.Thread(target=self._halt_stop, name="pybkx-halt", daemon=True).start()

    def _halt_stop(self) -> None:
        try:
            self.stop()
        except BookieError as exc:
            _event(logging.ERROR, "stopping after a halt failed", error=str(exc))

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
            server, storage, store = self._server, self._storage, self._store
            self._server = self._storage = self._store = None
            gc, self._gc = self._gc, None
            disks, self._disks = self._disks, None
            self._registered_read_only = None
            registered, self._registered = self._registered, False
        if disks is not None:
            disks.stop()
        if gc is not None and not gc.stop_periodic(budget_s / 4):
            _event(logging.WARNING, "a garbage collection pass is still running at the stop")
        try:
            if store is not None and registered:
                bookie_id = self.bookie_id
                if _bounded(
                    "unregistering", lambda: store.unregister_bookie(bookie_id), budget_s / 3
                ):
                    _event(logging.INFO, "bookie unregistered", bookie_id=self._bookie_id)
            self._stop_services()
            if server is not None:
                # Keep a quarter of the budget for closing the metadata store.
                left_ms = int((deadline - time.monotonic() - budget_s / 4) * 1000)
                drain_ms = max(0, min(self.drain_timeout_ms, left_ms))
                _event(logging.INFO, "stopping server", drain_timeout_ms=drain_ms)
                try:
                    server.stop(drain_ms)
                except Exception as exc:  # the storage must still be closed
                    _event(
                        logging.ERROR, "server stop failed", error=f"{type(exc).__name__}: {exc}"
                    )
                else:
                    _event(logging.INFO, "server stopped", **_stats(server))
            if storage is not None:
                counters = _stats(storage)
                try:
                    storage.close()
                except Exception as exc:
                    raise BookieError(
                        f"cannot close ledger storage cleanly: {type(exc).__name__}: {exc}"
                    ) from None
                _event(logging.INFO, "ledger storage closed (checkpointed)", **counters)
        finally:
            if store is not None:
                left_s = max(budget_s / 4, deadline - time.monotonic())
                if _bounded("closing metadata store", lambda: store.close(), left_s):
                    _event(logging.INFO, "metadata store closed")

    def run(self) -> int:
        """Start, serve until SIGTERM or SIGINT, stop; return the exit code (0).

        Must run in the main thread (signal handlers). Raises BookieError on a failed start or
        stop; a signal that arrives during the start stops the bookie right after it.
        """
        stop_requested = threading.Event()
        received: list[str] = []
        self._start_cancel.clear()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if stop_requested.is_set():
                _event(logging.WARNING, "already stopping", signal=name)
                return
            received.append(name)
            stop_requested.set()
            self._start_cancel.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
        self._in_run = True
        try:
            self.start()
            while not stop_requested.wait(_SIGNAL_POLL_S):
                if self._halt.is_set():
                    break
            if received:
                _event(logging.INFO, "stop requested", signal=received[0])
        finally:
            self._in_run = False
            try:
                self.stop()
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        _event(logging.INFO, "bookie stopped", bookie_id=self._bookie_id)
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

    def _start_services(self) -> None:
        """Start the services in order; the endpoints they publish join the registration.
        Raises BookieError (those already started are stopped again)."""
        endpoints: list[Endpoint] = []
        for service in self.services:
            try:
                endpoint = service.start(self)
            except BookieError:
                self._stop_services()
                raise
            self._started_services.append(service)
            if endpoint is not None:
                endpoints.append(endpoint)
        self._endpoints = tuple(endpoints)

    def _stop_services(self) -> None:
        while self._started_services:
            service = self._started_services.pop()
            try:
                service.stop()
            except Exception as exc:  # a service must not keep the bookie from stopping
                _event(
                    logging.ERROR,
                    "stopping a service failed",
                    service=service.name,
                    error=f"{type(exc).__name__}: {exc}",
                )

    def _identity(self, port: int) -> str:
        """``bookieId`` if configured, else ``host:port`` (BookKeeper's address rule)."""
        try:
            return self.config.bookie_identity(port)
        except ConfigError as exc:
            raise BookieError(str(exc)) from None

    def _join_cluster(self, uri: str, bookie_id: str) -> MetadataStore:
        """Open the store, initialise the cluster if it is new, check or stamp the cookie.
        Raises BookieError (the store is closed again)."""
        config = self.config
        _event(
            logging.INFO, "opening metadata store", metadata=uri, zk_timeout_ms=config.zk_timeout_ms
        )
        try:
            store = open_metadata_store(uri, zkTimeout=config.zk_timeout_ms)
        except ValueError as exc:
            raise BookieError(f"invalid metadataServiceUri in {config.source}: {exc}") from None
        except errors.BKException as exc:
            raise BookieError(
                f"cannot open the metadata store {uri}: {type(exc).__name__}: {exc}"
            ) from None
        try:
            if not store.is_initialized():
                # As BookKeeper: a bookie never creates a cluster, so a wrong root path fails
                # here instead of starting an empty cluster of its own.
                raise BookieError(
                    f"the metadata at {uri} is not initialised (no cluster there): check "
                    f"metadataServiceUri/zkLedgersRootPath in {config.source}, or create the "
                    f"cluster with `pybkx shell initnewcluster --uri {uri}`"
                )
            check = self._wait_for(
                "cookie check", lambda: check_and_stamp_cookie(store, config, bookie_id)
            )
        except errors.InvalidCookieException as exc:
            _close_store_quietly(store)
            raise BookieError(f"InvalidCookieException: {exc}") from None
        except errors.BKException as exc:
            _close_store_quietly(store)
            raise BookieError(f"metadata store {uri} failed: {type(exc).__name__}: {exc}") from None
        except OSError as exc:
            _close_store_quietly(store)
            raise BookieError(f"cannot write the cookie: {exc}") from None
        except BaseException:
            _close_store_quietly(store)
            raise
        _event(
            logging.INFO,
            "cookie stamped (new bookie)" if check.new_bookie else "cookie verified",
            bookie_id=bookie_id,
            instance_id=check.cookie.instance_id or "(none)",
        )
        return store

    def _register(self, store: MetadataStore, read_only: bool, during_start: bool = False) -> None:
        """Register (or move the registration of) this bookie. Raises BookieError.

        ``during_start``: the call is bounded by ``zkTimeout`` (a store that stopped answering
        would otherwise hold the start for ever: kazoo queues the request until it reconnects)
        and a stop signal received meanwhile raises _StartInterrupted.
        """
        bookie_id = self.bookie_id
        try:
            host, _, port = self.config.bookie_address(self.port).rpartition(":")
            info = BookieServiceInfo.for_address(host, int(port))
            service = BookieServiceInfo(
                endpoints=info.endpoints + self._endpoints, properties=info.properties
            )
            if during_start:
                self._wait_for(
                    "registration", lambda: store.register_bookie(bookie_id, read_only, service)
                )
            else:
                store.register_bookie(bookie_id, read_only, service)
        except (ConfigError, errors.BKException) as exc:
            _event(
                logging.ERROR,
                "registration failed",
                bookie_id=bookie_id,
                read_only=read_only,
                error=f"{type(exc).__name__}: {exc}",
            )
            raise BookieError(
                f"cannot register bookie {bookie_id} in {store.uri}: {type(exc).__name__}: {exc}"
            ) from None
        self._registered = True
        self._registered_read_only = read_only
        _event(
            logging.INFO,
            "bookie registered",
            bookie_id=bookie_id,
            read_only=read_only,
            metadata=store.uri,
        )

    def _wait_for(self, what: str, step: Callable[[], _T]) -> _T:
        """Run a metadata step of the start on a daemon thread and return its result; wait for
        it at most ``zkTimeout``, looking for a stop signal meanwhile (the main thread's signal
        handler runs while it waits). Raises BookieError on the timeout, _StartInterrupted on a
        stop signal, or what ``step`` raised."""
        timeout_ms = self.config.zk_timeout_ms
        failure: list[BaseException] = []
        result: list[_T] = []
        done = threading.Event()

        def run() -> None:
            try:
                result.append(step())
            except BaseException as exc:
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=run, name=f"pybkx-start-{what}", daemon=True).start()
        deadline = time.monotonic() + timeout_ms / 1000.0
        while not done.wait(_START_POLL_S):
            if self._start_cancel.is_set():
                raise _StartInterrupted(what)
            if time.monotonic() >= deadline:
                raise BookieError(
                    f"{what} in the metadata store got no answer within zkTimeout ({timeout_ms} "
                    "ms): is the metadata store reachable?"
                )
        if failure:
            raise failure[0]
        return result[0]

    def _open_storage(self) -> LedgerStorage:
        config = self.config
        _event(
            logging.INFO,
            "opening ledger storage",
            journal_dirs=config.journal_directories,
            ledger_dirs=config.ledger_directories,
            index_dirs=config.index_directories or "(ledger dirs)",
        )
        try:
            return LedgerStorage(config)
        except errors.BookieException as exc:  # directories locked, storage closed, corrupt
            raise BookieError(f"cannot open ledger storage: {exc}") from None
        except (OSError, ValueError, errors.BKException) as exc:
            raise BookieError(f"cannot open ledger storage: {type(exc).__name__}: {exc}") from None

    def _start_server(self, storage: LedgerStorage, host: str, port: int) -> BookieServer:
        """Listen; closes ``storage`` and raises BookieError on failure."""
        try:
            return BookieServer(storage, self.config, host, port)
        except Exception as exc:
            self._close_storage_after_failure(storage)
            if isinstance(exc, OSError):
                reason = exc.strerror or str(exc)
                raise BookieError(f"cannot listen on {host}:{port}: {reason}") from None
            raise BookieError(
                f"cannot start the bookie server on {host}:{port}: {type(exc).__name__}: {exc}"
            ) from None

    @staticmethod
    def _close_storage_after_failure(storage: LedgerStorage) -> None:
        try:
            storage.close()
        except Exception as exc:
            _event(logging.ERROR, "closing storage failed", error=f"{type(exc).__name__}: {exc}")
