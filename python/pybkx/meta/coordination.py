"""The coordination part of the metadata contract: exclusive locks and leader elections across
processes (recovery workers and the auditor use them). Abstract methods only."""

from __future__ import annotations

import abc
from collections.abc import Callable
from contextlib import AbstractContextManager


class Election(abc.ABC):
    """A leader election among contenders identified by strings (e.g. bookie ids)."""

    @abc.abstractmethod
    def run(self, on_elected: Callable[[], None]) -> None:
        """Block until elected, call ``on_elected`` while leading, then give up leadership.
        Returns early (without calling it) after ``cancel()`` or when the store closes."""

    @abc.abstractmethod
    def leader(self) -> str | None:
        """The current leader's identifier, if any."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop contending. A running ``on_elected`` is not interrupted: leadership ends when it
        returns (or the store's session ends), so there are never two leaders at once."""


class Coordination(abc.ABC):
    """Locks and elections whose holders die with their session."""

    @abc.abstractmethod
    def lock(
        self, name: str, identifier: str, timeout: float | None = None
    ) -> AbstractContextManager[None]:
        """An exclusive lock across processes, released on exit or when the holder dies.
        Raises TimeoutException if not acquired within ``timeout`` seconds."""

    @abc.abstractmethod
    def election(self, name: str, identifier: str) -> Election: ...
