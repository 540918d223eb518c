"""Bookie cookies: the identity a bookie stamps into its directories and the metadata store.
It checks and writes cookies (BookKeeper's rules); it must never open ledger storage or register."""

# BookKeeper (``LegacyCookieValidation``) on every start of a bookie with a metadata service:
#   1. The expected ("master") cookie: bookie id, journal dirs, ledger dirs, index dirs (if
#      configured) and the cluster's instance id.
#   2. The store's cookie, if any, must match it.
#   3. Every directory's ``current/VERSION``, if present, must match it.
#   4. Some directories without a cookie: allowed only for a new bookie (no cookie in the store)
#      whose cookie-less directories are empty; then the cookie is written to every directory
#      and then to the store. Otherwise refused (a replaced disk would silently lose data).
#   5. Every directory has a cookie but the store has none: refused.

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pybkx import errors
from pybkx.config import ServerConfig
from pybkx.meta import Cookie, MetadataStore, serde

__all__ = [
    "CURRENT_DIR",
    "VERSION_FILE",
    "CookieCheck",
    "check_and_stamp_cookie",
    "cookie_differences",
    "cookie_directories",
    "expected_cookie",
    "read_directory_cookie",
    "write_directory_cookie",
]

CURRENT_DIR: Final = "current"
VERSION_FILE: Final = "VERSION"


@dataclass(frozen=True)
class CookieCheck:
    """The outcome of :func:`check_and_stamp_cookie`."""

    cookie: Cookie
    """The bookie's cookie, as it now is in the store and in every directory."""
    new_bookie: bool
    """True if this check stamped the cookie (a bookie joining for the first time)."""


def cookie_directories(config: ServerConfig) -> list[Path]:
    """Every directory that holds a copy of the cookie: journal, ledger, then index directories
    (each once, in configuration order)."""
    dirs: list[Path] = []
    for group in (config.journal_directories, config.ledger_directories, config.index_directories):
        for d in group or ():
            path = Path(d)
            if path not in dirs:
                dirs.append(path)
    return dirs


def expected_cookie(config: ServerConfig, bookie_id: str, instance_id: str | None) -> Cookie:
    """The cookie a bookie with this configuration, id and cluster must have. Directory names are
    taken as configured (not resolved), as BookKeeper does."""
    return Cookie(
        bookie_id=bookie_id,
        journal_dirs=tuple(config.journal_directories),
        ledger_dirs=tuple(config.ledger_directories),
        instance_id=instance_id,
        index_dirs=None if config.index_directories is None else tuple(config.index_directories),
    )


def cookie_differences(expected: Cookie, found: Cookie) -> list[str]:
    """What differs between two cookies, one phrase per field (empty if they match).

    ``indexDirs`` absent on either side is compared as its ``ledgerDirs``, as in BookKeeper.
    """

    def show(value: tuple[str, ...] | str | None) -> str:
        if value is None:
            return "(none)"
        return value if isinstance(value, str) else ",".join(value)

    fields: list[tuple[str, tuple[str, ...] | str | None, tuple[str, ...] | str | None]] = [
        ("bookie id", expected.bookie_id, found.bookie_id),
        ("journal dirs", expected.journal_dirs, found.journal_dirs),
        ("ledger dirs", expected.ledger_dirs, found.ledger_dirs),
        ("instance id", expected.instance_id, found.instance_id),
    ]
    if expected.index_dirs is not None or found.index_dirs is not None:
        fields.append(
            (
                "index dirs",
                expected.index_dirs or expected.ledger_dirs,
                found.index_dirs or found.ledger_dirs,
            )
        )
    return [
        f"{name} are {show(mine)} but the cookie says {show(theirs)}"
        if name.endswith("dirs")
        else f"{name} is {show(mine)} but the cookie says {show(theirs)}"
        for name, mine, theirs in fields
        if mine != theirs
    ]


def read_directory_cookie(directory: Path) -> Cookie | None:
    """The cookie in ``directory/current/VERSION``, or None if there is none.

    Raises InvalidCookieException if the file cannot be read or parsed.
    """
    path = directory / CURRENT_DIR / VERSION_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise errors.InvalidCookieException(
            f"cannot read the cookie {path}: {exc.strerror or exc}"
        ) from None
    try:
        return serde.parse_cookie(data)
    except errors.InvalidCookieException as exc:
        raise errors.InvalidCookieException(f"{path}: {exc}") from None


def write_directory_cookie(directory: Path, cookie: Cookie) -> None:
    """Write ``cookie`` to ``directory/current/VERSION`` durably (temporary file, fsync,
    rename, fsync of the directory). Raises OSError."""
    current = directory / CURRENT_DIR
    current.mkdir(parents=True, exist_ok=True)
    target = current / VERSION_FILE
    temporary = current / f"{VERSION_FILE}.tmp"
    data = serde.serialize_cookie(cookie)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, target)
    dir_fd = os.open(current, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _is_empty(directory: Path) -> bool:
    """A directory counts as empty when its ``current/`` is missing or holds nothing."""
    current = directory / CURRENT_DIR
    try:
        return not any(current.iterdir())
    except FileNotFoundError:
        return True
    except NotADirectoryError:
        return False


def check_and_stamp_cookie(
    store: MetadataStore, config: ServerConfig, bookie_id: str
) -> CookieCheck:
    """Check the bookie's cookie against its directories and the store; stamp a new bookie.

    Must run before the ledger storage opens (it judges whether the directories are empty).
    Raises InvalidCookieException (one line naming the directory or the store and what differs)
    when a cookie does not match, when directories lack a cookie the store has, or when the
    directories have a cookie the store lacks; MetaStoreException if the store fails; OSError
    if a cookie cannot be written.
    """
    expected = expected_cookie(config, bookie_id, store.instance_id())
    stored = _stored_cookie(store, bookie_id, expected)
    missing = _directories_without_cookie(config, bookie_id, expected)
    if not missing:
        if stored is None:
            raise errors.InvalidCookieException(
                f"bookie {bookie_id} has cookies in its directories but none in {store.uri} "
                "(metadata formatted, or another cluster): format the bookie or restore the "
                "cookie"
            )
        return CookieCheck(stored, new_bookie=False)
    if stored is not None:
        names = ",".join(str(d) for d in missing)
        raise errors.InvalidCookieException(
            f"bookie {bookie_id} has a cookie in {store.uri} but directories {names} have none "
            "(a replaced or wiped disk?): refusing to start; decommission the bookie or "
            "restore the directories"
        )
    return _stamp_new_bookie(store, config, bookie_id, expected, missing)


def _stored_cookie(store: MetadataStore, bookie_id: str, expected: Cookie) -> Cookie | None:
    """The store's cookie of ``bookie_id`` (None: there is none). Raises
    InvalidCookieException when it does not match ``expected``."""
    try:
        stored = store.read_cookie(bookie_id).value
    except errors.CookieNotFoundException:
        return None
    diffs = cookie_differences(expected, stored)
    if diffs:
        raise errors.InvalidCookieException(
            f"the cookie of bookie {bookie_id} in {store.uri} does not match: " + "; ".join(diffs)
        )
    return stored


def _directories_without_cookie(
    config: ServerConfig, bookie_id: str, expected: Cookie
) -> list[Path]:
    """The bookie's directories that hold no cookie. Raises InvalidCookieException when one
    holds a cookie other than ``expected``."""
    missing: list[Path] = []
    for directory in cookie_directories(config):
        found = read_directory_cookie(directory)
        if found is None:
            missing.append(directory)
            continue
        diffs = cookie_differences(expected, found)
        if diffs:
            where = directory / CURRENT_DIR / VERSION_FILE
            raise errors.InvalidCookieException(
                f"the cookie in {where} does not match bookie {bookie_id}: " + "; ".join(diffs)
            )
    return missing


def _stamp_new_bookie(
    store: MetadataStore,
    config: ServerConfig,
    bookie_id: str,
    expected: Cookie,
    missing: list[Path],
) -> CookieCheck:
    """A bookie new to the store: its cookie-less directories must be empty; the cookie goes to
    every directory, then to the store (a concurrent stamp of the same cookie is accepted).
    Raises InvalidCookieException, MetaStoreException, OSError."""
    not_empty = [d for d in missing if not _is_empty(d)]
    if not_empty:
        names = ",".join(str(d) for d in not_empty)
        raise errors.InvalidCookieException(
            f"bookie {bookie_id} is new to {store.uri} but directories {names} hold data "
            "without a cookie: use empty directories"
        )
    for directory in cookie_directories(config):
        write_directory_cookie(directory, expected)
    try:
        written = store.write_cookie(bookie_id, expected, None)
    except errors.MetadataVersionException:  # another process stamped it meanwhile
        raced = store.read_cookie(bookie_id).value
        diffs = cookie_differences(expected, raced)
        if diffs:
            raise errors.InvalidCookieException(
                f"the cookie of bookie {bookie_id} written concurrently to {store.uri} does "
                "not match: " + "; ".join(diffs)
            ) from None
        return CookieCheck(raced, new_bookie=True)
    return CookieCheck(written.value, new_bookie=True)
