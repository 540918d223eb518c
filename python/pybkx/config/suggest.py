"""'Did you mean': the closest known configuration key to a misspelt one. Pure string work."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest"]


def closest(key: str, known: Iterable[str]) -> str | None:
    """The known key ``key`` most likely meant: the same key in another case, else the
    closest by similarity (at least 0.8), else None."""
    candidates = list(known)
    folded = key.casefold()
    for candidate in candidates:
        if candidate.casefold() == folded:
            return candidate
    matches = difflib.get_close_matches(key, candidates, n=1, cutoff=0.8)
    return matches[0] if matches else None
