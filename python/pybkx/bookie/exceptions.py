"""BookieError: the one exception of the bookie's control plane, whose message is one line for
the operator. It never replaces the ``pybkx.errors`` classes that storage and clients raise."""

from __future__ import annotations

__all__ = ["BookieError"]


class BookieError(Exception):
    """The bookie could not start or stop cleanly; the message is one line for the operator."""
