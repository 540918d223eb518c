"""``persistBookieStatusEnabled``: the read-only state in BookKeeper's ``BOOKIE_STATUS`` files
outlives a restart. An operator's read-only mode comes back read-only and stays so; one the disk
checker set comes back read-only and is undone by the checker once the disks have room; without
the key a restarted bookie is writable. The file's line is BookKeeper's, both ways."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.bookies import ROOMY, disk_bookie, wait_for_disk_checks
from support.wait import wait_until

from pybkx.bookie import Bookie
from pybkx.bookie.status import STATUS_FILE, BookieStatus, parse, read_status, write_status
from pybkx.meta import open_metadata_store


def test_the_status_line_is_bookkeepers() -> None:
    # BookKeeper 4.17 writes four fields; older bookies wrote three (then: set by an operator).
    assert parse("1,READ_ONLY,1700000000000,false\n") == BookieStatus(True, False, 1700000000000)
    assert parse("1,READ_WRITE,5,false") == BookieStatus(False, False, 5)
    assert parse("1,READ_ONLY,7") == BookieStatus(True, True, 7)
    for bad in ("", "2,READ_ONLY,1,true", "1,SLEEPING,1,true", "1,READ_ONLY,soon,true", "junk"):
        assert parse(bad) is None
    assert BookieStatus(True, True, 42).line() == "1,READ_ONLY,42,true\n"


def test_the_newest_copy_wins_and_bad_copies_are_skipped(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for d in dirs:
        (d / "current").mkdir(parents=True)
    (dirs[0] / "current" / STATUS_FILE).write_text("1,READ_WRITE,100,false\n")
    (dirs[1] / "current" / STATUS_FILE).write_text("1,READ_ONLY,200,true\n")
    (dirs[2] / "current" / STATUS_FILE).write_text("garbage")
    assert read_status(dirs) == BookieStatus(True, True, 200)
    assert write_status(dirs, read_only=False, manual=False)
    for d in dirs:
        assert parse((d / "current" / STATUS_FILE).read_text()) is not None
    got = read_status(dirs)
    assert got is not None and not got.read_only
    assert read_status([tmp_path / "nowhere"]) is None
    assert not write_status([tmp_path / "nowhere"], read_only=True, manual=True)


def restart(bookie: Bookie, tmp_path: Path, uri: str, disk: Path, **keys: object) -> Bookie:
    port = bookie.port
    bookie.stop()
    again = disk_bookie(tmp_path, uri, disk, bookiePort=port, **keys)
    again.start()
    return again


def started(tmp_path: Path) -> tuple[str, Path, dict[str, str], Bookie]:
    """A bookie with persistBookieStatusEnabled on a new embedded cluster, started; its
    cluster, disk and keys."""
    uri = f"embedded://{tmp_path / 'metadata'}"
    with open_metadata_store(uri) as store:
        store.init_new_cluster()
    disk = tmp_path / "disk"
    keys = {"persistBookieStatusEnabled": "true", **ROOMY}
    bookie = disk_bookie(tmp_path, uri, disk, **keys)
    bookie.start()
    return uri, disk, keys, bookie


@pytest.mark.integration
def test_an_operators_read_only_mode_survives_a_restart(tmp_path: Path) -> None:
    uri, disk, keys, bookie = started(tmp_path)
    try:
        bookie.set_read_only(True)
        bookie = restart(bookie, tmp_path, uri, disk, **keys)
        assert bookie.read_only
        with open_metadata_store(uri) as store:
            assert bookie.bookie_id in store.readonly_bookies()
            assert bookie.bookie_id not in store.writable_bookies()
        wait_for_disk_checks(bookie, 3)  # with room: an operator's choice stays
        assert bookie.read_only
        bookie.set_read_only(False)
        bookie = restart(bookie, tmp_path, uri, disk, **keys)
        assert not bookie.read_only
        with open_metadata_store(uri) as store:
            assert bookie.bookie_id in store.writable_bookies()
        # Without the key the state is not kept (BookKeeper's default).
        bookie.set_read_only(True)
        bookie = restart(bookie, tmp_path, uri, disk, **ROOMY)
        assert not bookie.read_only
    finally:
        bookie.stop()


@pytest.mark.integration
def test_a_read_only_mode_the_disks_caused_is_undone_after_a_restart_when_they_have_room(
    tmp_path: Path,
) -> None:
    uri, disk, keys, bookie = started(tmp_path)
    port = bookie.port
    bookie.stop()
    # As a bookie that went read-only on full disks and was restarted leaves it.
    assert write_status([disk / "ledgers"], read_only=True, manual=False)
    bookie = disk_bookie(tmp_path, uri, disk, bookiePort=port, **keys)
    bookie.start()
    try:
        wait_until(lambda: not bookie.read_only, "writable again by the disk checker", timeout_s=10)
        with open_metadata_store(uri) as store:
            wait_until(
                lambda: bookie.bookie_id in store.writable_bookies(),
                "registered writable again",
                timeout_s=10,
            )
        status = read_status([disk / "ledgers"])
        assert status is not None and not status.read_only
    finally:
        bookie.stop()
