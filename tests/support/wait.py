"""Waiting in the tests: poll a condition until it holds, for a bounded time.

Owns the one way a test waits for something to happen (a log line, a metric, a file, a state);
must never sleep a fixed time in place of a condition, and never import pytest (scripts such as
the nemesis and the benchmarks' harness use it too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_INTERVAL_S = 0.05
#: How much of the last value seen a failure shows (the end of a longer one).
LAST_SEEN_CHARS = 2000


class WaitTimeout(AssertionError):
    """A condition did not hold in time. The message names what was awaited and the last value
    the condition returned (or the last exception it raised of those it was allowed to)."""

    def __init__(self, what: str, timeout_s: float, last: object) -> None:
        seen = repr(last)
        if len(seen) > LAST_SEEN_CHARS:  # a log or a page: its end is what tells
            seen = "..." + seen[-LAST_SEEN_CHARS:]
        super().__init__(f"not within {timeout_s:g}s: {what} (last seen: {seen})")
        self.what = what
        self.last = last


def wait_until(
    condition: Callable[[], T],
    what: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = DEFAULT_INTERVAL_S,
    ignoring: tuple[type[Exception], ...] = (),
    accept: Callable[[T], object] = bool,
) -> T:
    """Call ``condition`` every ``interval_s`` until it returns a truthy value; return that value.

    ``what`` says what is awaited, for the failure. ``accept`` judges a value instead of its
    truth, so that a probe (a status page, a screen) can return what it saw and the failure show
    it. An exception of a type in ``ignoring`` counts as "not yet" (the condition is an operation
    that fails until the awaited state comes); any other exception propagates at once. The last
    try is at or past the deadline, so a state reached while the test was descheduled counts.

    Raises WaitTimeout (an AssertionError) once ``timeout_s`` has passed without an accepted
    value.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = condition()
        except ignoring as exc:
            last: object = exc
        else:
            if accept(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise WaitTimeout(what, timeout_s, last)
        time.sleep(interval_s)
