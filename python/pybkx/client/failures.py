"""The one failure dispatcher of a client: bookie failures reported by the Rust writers of all
its ledgers arrive on one queue, and each writer's are handed, batched and one batch at a time,
to the handler its ledger registered. It never decides a replacement itself.

One thread waits on the queue (blocking in Rust, no polling); handlers run on a small pool
(``numWorkerThreads``), so one ledger waiting for a replacement bookie never holds up another.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from pybkx._core import BookieFailure, FailureQueue

__all__ = ["BookieFailure", "FailureDispatcher", "FailureHandler"]

logger = logging.getLogger(__name__)

#: How long the dispatcher thread waits on the queue before looking at its stop flag.
_QUEUE_WAIT_S = 1.0


FailureHandler = Callable[[Mapping[int, BookieFailure]], None]
"""Called with the failures of one writer, by ensemble index, on a pool thread."""


class FailureDispatcher:
    """Routes writer failures to their handlers; see the module docstring."""

    def __init__(self, queue: FailureQueue, workers: int) -> None:
        self.queue = queue
        self._workers = workers
        self._lock = threading.Lock()
        self._handlers: dict[int, FailureHandler] = {}
        # At most one failure per ensemble index of each registered writer (a later one of the
        # same slot replaces it).
        self._pending: dict[int, dict[int, BookieFailure]] = {}
        self._running: set[int] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def register(self, writer_id: int, handler: FailureHandler) -> None:
        """Send the failures of ``writer_id`` to ``handler`` from now on."""
        with self._lock:
            if self._closed:
                return
            self._handlers[writer_id] = handler
            if self._thread is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="pybkx-ensemble")
                self._thread = threading.Thread(
                    target=self._run, name="pybkx-failures", daemon=True
                )
                self._thread.start()

    def unregister(self, writer_id: int) -> None:
        """Stop handling ``writer_id``; failures still queued for it are dropped."""
        with self._lock:
            self._handlers.pop(writer_id, None)
            self._pending.pop(writer_id, None)

    def close(self) -> None:
        """Stop the thread and the pool (handlers running now finish). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread, pool = self._thread, self._pool
            self._handlers.clear()
            self._pending.clear()
        self.queue.close()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * _QUEUE_WAIT_S)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._closed:
            try:
                event = self.queue.next(_QUEUE_WAIT_S)
            except Exception:  # never let the dispatcher die silently
                logger.exception("reading the bookie failure queue")
                continue
            if event is not None:
                self._route(event)

    def _route(self, failure: BookieFailure) -> None:
        with self._lock:
            if failure.writer_id not in self._handlers or self._pool is None:
                logger.debug("failure of a finished writer ignored: %s", failure)
                return
            self._pending.setdefault(failure.writer_id, {})[failure.index] = failure
            if failure.writer_id in self._running:
                return  # the running drain picks it up
            self._running.add(failure.writer_id)
            self._pool.submit(self._drain, failure.writer_id)

    def _drain(self, writer_id: int) -> None:
        while True:
            with self._lock:
                batch = self._pending.pop(writer_id, None)
                handler = self._handlers.get(writer_id)
                if not batch or handler is None:
                    self._running.discard(writer_id)
                    return
            try:
                handler(batch)
            except Exception:
                logger.exception("handling bookie failures of writer %d", writer_id)
