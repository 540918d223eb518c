"""The bookie's place in its cluster: opening the metadata store, the cookie check, the
registration (writable or read-only) and its removal, each metadata step bounded in time so that
an unreachable store never holds a start or a stop for ever. It never decides which mode the
registration shows (the read-only state machine does) and never touches storage or the server."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from pybkx import errors
from pybkx.bookie.cookies import check_and_stamp_cookie
from pybkx.bookie.events import log_event
from pybkx.bookie.exceptions import BookieError
from pybkx.config import ConfigError, ServerConfig
from pybkx.meta import BookieServiceInfo, Endpoint, MetadataStore, open_metadata_store

__all__ = [
    "Registration",
    "StartInterrupted",
    "StartWait",
    "close_store_quietly",
    "join_cluster",
    "run_bounded",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: The longest a failed start waits for the metadata store to close.
_CLOSE_AFTER_FAILURE_S = 5.0
#: How often a start waiting for the metadata store looks for a stop signal.
_START_POLL_S = 0.05


class StartInterrupted(Exception):
    """A stop signal arrived while the start waited for the metadata store."""


class _Step(Generic[_T]):
    """One metadata step running on a daemon thread of its own, so that its caller can stop
    waiting for it (an abandoned step dies with the process)."""

    def __init__(self, thread_name: str, step: Callable[[], _T]) -> None:
        self.done = threading.Event()
        self._step = step
        self._result: list[_T] = []
        self._failure: list[BaseException] = []
        threading.Thread(target=self._run, name=thread_name, daemon=True).start()

    def _run(self) -> None:
        try:
            self._result.append(self._step())
        except BaseException as exc:
            self._failure.append(exc)
        finally:
            self.done.set()

    def result(self) -> _T:
        """What the finished step returned; raises what it raised."""
        if self._failure:
            raise self._failure[0]
        return self._result[0]


def run_bounded(what: str, step: Callable[[], object], timeout_s: float) -> bool:
    """Run ``step`` on a daemon thread and wait at most ``timeout_s`` for it; True if it
    finished without raising. A failure or a timeout is logged, never raised: a stopping bookie
    must not wait on an unreachable metadata store (the abandoned thread dies with the process).
    """
    running = _Step(f"pybkx-stop-{what}", step)
    if not running.done.wait(timeout_s):
        log_event(
            logger,
            logging.WARNING,
            f"{what} did not finish in time; going on without it",
            timeout_ms=int(timeout_s * 1000),
        )
        return False
    try:
        running.result()
    except BaseException as exc:
        log_event(logger, logging.ERROR, f"{what} failed", error=f"{type(exc).__name__}: {exc}")
        return False
    return True


def close_store_quietly(store: MetadataStore) -> None:
    """Close after a failed start: bounded, logged (a store that stopped answering must not
    keep the bookie from exiting)."""
    run_bounded("closing metadata store", store.close, _CLOSE_AFTER_FAILURE_S)


class StartWait:
    """How a start waits for a metadata step: at most ``timeout_ms`` (``zkTimeout``), and no
    longer once ``cancel`` is set (by ``Bookie.run()``'s signal handler)."""

    def __init__(self, timeout_ms: int, cancel: threading.Event) -> None:
        self.timeout_ms = timeout_ms
        self.cancel = cancel

    def run(self, what: str, step: Callable[[], _T]) -> _T:
        """Run ``step`` on a daemon thread and return its result. Raises BookieError on the
        timeout, StartInterrupted on a stop signal, or what ``step`` raised.

        It looks for the signal every few tens of milliseconds rather than being woken by it:
        the signal handler runs on this very thread, between two bytecodes of its wait, where
        setting an Event the wait holds the lock of could deadlock."""
        running = _Step(f"pybkx-start-{what}", step)
        deadline = time.monotonic() + self.timeout_ms / 1000.0
        while not running.done.wait(_START_POLL_S):
            if self.cancel.is_set():
                raise StartInterrupted(what)
            if time.monotonic() >= deadline:
                raise BookieError(
                    f"{what} in the metadata store got no answer within zkTimeout "
                    f"({self.timeout_ms} ms): is the metadata store reachable?"
                )
        return running.result()


def _open_store(config: ServerConfig, uri: str) -> MetadataStore:
    """Raises BookieError."""
    log_event(
        logger,
        logging.INFO,
        "opening metadata store",
        metadata=uri,
        zk_timeout_ms=config.zk_timeout_ms,
    )
    try:
        return open_metadata_store(
            uri, zkTimeout=config.zk_timeout_ms, **config.zk_security_settings()
        )
    except ConfigError as exc:  # zkEnableSecurity without an identity, a bad JAAS file
        raise BookieError(f"{exc} (in {config.source})") from None
    except ValueError as exc:
        raise BookieError(f"invalid metadataServiceUri in {config.source}: {exc}") from None
    except errors.BKException as exc:
        raise BookieError(
            f"cannot open the metadata store {uri}: {type(exc).__name__}: {exc}"
        ) from None


def join_cluster(config: ServerConfig, uri: str, bookie_id: str, wait: StartWait) -> MetadataStore:
    """Open the store at ``uri`` (an initialised cluster) and check or stamp the cookie, within
    ``wait``. Raises BookieError (one line for the operator; a cookie mismatch starts with
    ``InvalidCookieException``) or StartInterrupted; the store is closed again on failure."""
    store = _open_store(config, uri)
    try:
        if not store.is_initialized():
            # As BookKeeper: a bookie never creates a cluster, so a wrong root path fails
            # here instead of starting an empty cluster of its own.
            raise BookieError(
                f"the metadata at {uri} is not initialised (no cluster there): check "
                f"metadataServiceUri/zkLedgersRootPath in {config.source}, or create the "
                f"cluster with `pybkx shell initnewcluster --uri {uri}`"
            )
        check = wait.run("cookie check", lambda: check_and_stamp_cookie(store, config, bookie_id))
    except errors.InvalidCookieException as exc:
        close_store_quietly(store)
        raise BookieError(f"InvalidCookieException: {exc}") from None
    except errors.BKException as exc:
        close_store_quietly(store)
        raise BookieError(f"metadata store {uri} failed: {type(exc).__name__}: {exc}") from None
    except OSError as exc:
        close_store_quietly(store)
        raise BookieError(f"cannot write the cookie: {exc}") from None
    except BaseException:
        close_store_quietly(store)
        raise
    log_event(
        logger,
        logging.INFO,
        "cookie stamped (new bookie)" if check.new_bookie else "cookie verified",
        bookie_id=bookie_id,
        instance_id=check.cookie.instance_id or "(none)",
    )
    return store


class Registration:
    """This bookie's registration in ``store`` (the store it joined with): made, moved between
    writable and read-only, removed. Not thread-safe: the read-only state machine and the
    bookie's start and stop take turns with it."""

    def __init__(
        self, store: MetadataStore, config: ServerConfig, bookie_id: str, port: int
    ) -> None:
        self.store = store
        self._config = config
        self._bookie_id = bookie_id
        self._port = port
        self.endpoints: tuple[Endpoint, ...] = ()
        """What the services beside the bookie publish; set before the first registration."""
        self.registered = False
        self.shows_read_only: bool | None = None
        """The mode the registration shows (None: not registered); a failed move leaves the
        old one."""

    def register(self, read_only: bool, wait: StartWait | None = None) -> None:
        """Register (or move the registration of) this bookie. Raises BookieError.

        With ``wait`` (during the start) the call is bounded by it (a store that stopped
        answering would otherwise hold the start for ever: kazoo queues the request until it
        reconnects) and a stop signal received meanwhile raises StartInterrupted.
        """
        bookie_id, store = self._bookie_id, self.store
        try:
            host, _, port = self._config.bookie_address(self._port).rpartition(":")
            info = BookieServiceInfo.for_address(host, int(port))
            service = BookieServiceInfo(
                endpoints=info.endpoints + self.endpoints, properties=info.properties
            )
            if wait is not None:
                wait.run(
                    "registration", lambda: store.register_bookie(bookie_id, read_only, service)
                )
            else:
                store.register_bookie(bookie_id, read_only, service)
        except (ConfigError, errors.BKException) as exc:
            log_event(
                logger,
                logging.ERROR,
                "registration failed",
                bookie_id=bookie_id,
                read_only=read_only,
                error=f"{type(exc).__name__}: {exc}",
            )
            raise BookieError(
                f"cannot register bookie {bookie_id} in {store.uri}: {type(exc).__name__}: {exc}"
            ) from None
        self.registered = True
        self.shows_read_only = read_only
        log_event(
            logger,
            logging.INFO,
            "bookie registered",
            bookie_id=bookie_id,
            read_only=read_only,
            metadata=store.uri,
        )

    def unregister(self, timeout_s: float) -> None:
        """Remove the registration, if made, waiting at most ``timeout_s``. Never raises: a
        registration left behind ends with the store's session."""
        if not self.registered:
            return
        self.registered = False
        self.shows_read_only = None
        bookie_id, store = self._bookie_id, self.store
        if run_bounded("unregistering", lambda: store.unregister_bookie(bookie_id), timeout_s):
            log_event(logger, logging.INFO, "bookie unregistered", bookie_id=bookie_id)

    def close(self, timeout_s: float) -> None:
        """Close the store (ending its session), waiting at most ``timeout_s``. Never raises."""
        if run_bounded("closing metadata store", self.store.close, timeout_s):
            log_event(logger, logging.INFO, "metadata store closed")
