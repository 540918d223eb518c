"""Logging for pybkx's commands: one line format (time, level, logger, message) for Python's
records and the Rust core's alike, which reach ``logging`` as ``pybkx.core.<module>``. It sets
up handlers; it never decides what is logged."""

from __future__ import annotations

import logging
from typing import TextIO

from pybkx import _core

__all__ = ["LOG_FORMAT", "configure"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(level: int, stream: TextIO) -> None:
    """Send every record at ``level`` or above to ``stream`` in LOG_FORMAT, Rust's included."""
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=stream)
    _core.set_log_level(level)
