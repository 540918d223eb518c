"""Bookie quarantine, as BookKeeper's client does it: once per ``bookieHealthCheckIntervalSeconds``
the health check takes each bookie's error count from the Rust connections (and resets it); a
bookie with ``bookieErrorThresholdPerInterval`` errors or more is quarantined (with probability
``bookieQuarantineRatio``) for ``bookieQuarantineTimeSeconds``. It says which bookies new
ensembles and replacements should avoid; it never chooses an ensemble itself.

The errors counted are BookKeeper's: timeouts and bookie answers other than the expected ones
(see ``BookieClient.take_error_counts``). A bookie whose connection is refused is not counted:
a bookie that is down leaves the registration, and placement stops choosing it then.

One thread per client (made only when ``bookieHealthCheckEnabled``) waits on a condition, so
``close()`` stops it at once; it also wakes when a quarantine ends, to release it on time.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable

from pybkx._core import BookieClient
from pybkx.client.metrics import count_quarantine, count_quarantine_skip, set_quarantined
from pybkx.config import ClientConfig

__all__ = ["BookieHealth"]

logger = logging.getLogger(__name__)

#: How long ``close()`` waits for the thread (it only ever waits on the condition).
_JOIN_S = 5.0


class BookieHealth:
    """The quarantined bookies of one client, and the thread that checks for faulty ones."""

    def __init__(
        self,
        config: ClientConfig,
        bookies: BookieClient,
        address_of: Callable[[str], str],
        registered: Callable[[], Iterable[str]],
    ) -> None:
        self._config = config
        self._bookies = bookies
        self._address_of = address_of
        self._registered = registered
        self._lock = threading.Lock()
        # Notified on a new quarantine (an earlier wake time) and on close.
        self._changed = threading.Condition(self._lock)
        # Bookie id -> monotonic time its quarantine ends.
        self._until: dict[str, float] = {}
        self._closed = False
        self._thread: threading.Thread | None = None
        if config.bookie_health_check_enabled:
            self._thread = threading.Thread(
                target=self._run, name="pybkx-bookie-health", daemon=True
            )
            self._thread.start()

    # --- what placement asks ----------------------------------------------------------------

    def quarantined(self) -> frozenset[str]:
        """The bookie ids quarantined now (an ended quarantine is released here)."""
        self._release_expired(time.monotonic())
        with self._lock:
            return frozenset(self._until)

    def is_quarantined(self, bookie_id: str) -> bool:
        """Whether ``bookie_id`` is quarantined now."""
        return bookie_id in self.quarantined()

    # --- what changes it --------------------------------------------------------------------

    def quarantine(self, bookie_id: str) -> bool:
        """Quarantine ``bookie_id`` for ``bookieQuarantineTimeSeconds`` (BookKeeper's
        ``quarantineBookie``): True if it was not quarantined already (a quarantined bookie
        keeps its end time). After ``close()`` it does nothing (False)."""
        end = time.monotonic() + self._config.bookie_quarantine_time_seconds
        with self._lock:
            if self._closed or bookie_id in self._until:
                return False
            self._until[bookie_id] = end
            count = len(self._until)
            self._changed.notify_all()
        set_quarantined(count, self)
        logger.warning(
            "bookie %s quarantined for %d s because of read/write errors: new ensembles "
            "leave it out while other bookies can take its place",
            bookie_id,
            self._config.bookie_quarantine_time_seconds,
        )
        return True

    def check(self) -> list[str]:
        """One health check (BookKeeper's ``checkForFaultyBookies``): takes every bookie's
        error count of the interval, resets it, and quarantines the bookies at or over the
        threshold. Returns the bookie ids newly quarantined."""
        counts = self._bookies.take_error_counts()
        threshold = self._config.bookie_error_threshold_per_interval
        faulty = [address for address, n in counts.items() if n >= threshold]
        if not faulty:
            return []
        ids = self._ids_by_address()
        newly: list[str] = []
        for address in faulty:
            bookie_id = ids.get(address, address)
            if random.random() > self._config.bookie_quarantine_ratio:
                count_quarantine_skip()
                logger.info(
                    "bookie %s had %d errors in the interval; left out of quarantine by "
                    "bookieQuarantineRatio",
                    bookie_id,
                    counts[address],
                )
                continue
            count_quarantine()
            if self.quarantine(bookie_id):
                newly.append(bookie_id)
        return newly

    def close(self) -> None:
        """Stop the thread and release every quarantine (the gauge drops them). Idempotent."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_JOIN_S)
        with self._lock:
            self._until.clear()
        set_quarantined(0, self)

    # --- inside -----------------------------------------------------------------------------

    def _ids_by_address(self) -> dict[str, str]:
        """Address -> bookie id for the registered bookies (error counts are by address)."""
        return {self._address_of(b): b for b in self._registered()}

    def _release_expired(self, now: float) -> None:
        with self._lock:
            ended = [b for b, end in self._until.items() if end <= now]
            for b in ended:
                del self._until[b]
            count = len(self._until)
        if not ended:
            return
        set_quarantined(count, self)
        for b in ended:
            logger.info("bookie %s is no longer quarantined", b)

    def _wait(self, next_check: float) -> bool:
        """Waits until ``next_check`` or the first quarantine's end (or a change); False once
        closed."""
        with self._changed:
            if not self._closed:
                wake = min([next_check, *self._until.values()])
                self._changed.wait(max(0.0, wake - time.monotonic()))
            return not self._closed

    def _run(self) -> None:
        interval = self._config.bookie_health_check_interval_seconds
        next_check = time.monotonic() + interval
        while self._wait(next_check):
            now = time.monotonic()
            self._release_expired(now)
            if now >= next_check:
                next_check = now + interval
                try:
                    self.check()
                except Exception:  # the check must go on: a bad interval is only logged
                    logger.exception("bookie health check failed")
