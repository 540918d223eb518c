"""The asyncio face of ``pybkx._core.Future``: awaiting one resolves an asyncio future of the
running loop from the Rust future's completion callback. No thread per call, no polling."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from pybkx._core import Future

__all__ = ["await_future", "wrap"]


def wrap(future: Future, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Future[Any]:
    """An asyncio future of ``loop`` (default: the running one) with ``future``'s outcome.
    Cancelling it does not cancel the operation (it was sent to bookies already)."""
    loop = loop or asyncio.get_running_loop()
    result: asyncio.Future[Any] = loop.create_future()

    def settle(done: Future) -> None:
        if result.cancelled():
            return
        try:
            result.set_result(done.result(0))
        except BaseException as exc:  # the operation's exception, delivered to the awaiter
            result.set_exception(exc)

    def on_done(done: Future) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(settle, done)

    future.add_done_callback(on_done)
    return result


def await_future(future: Future) -> Generator[Any, None, Any]:
    """What ``Future.__await__`` returns: the iterator of an asyncio future wrapping it."""
    return wrap(future).__await__()
