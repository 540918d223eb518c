"""The nemesis's ``disk_full`` fault: every bookie's disk (a small tmpfs of its own holding its
journal and ledgers) filled to 100% by a foreign file, then ledgers deleted, and every bookie
must be writable again by itself, the same process (no restart), within
``RunConfig.writable_again_s``.

The fault is two halves, which the nemesis runs as its start and, after its hold, its heal:

- **fill**: a ballast ledger of an eighth of a disk is written on every bookie and read whole
  (the workload's client, recorded in the history); once every bookie's checkpoint has let
  its journal files go (else the fill is undone at once by the next checkpoint removing them,
  and no delete is needed), each disk is filled to 100% by a foreign file. Every bookie must
  register read-only within ``READ_ONLY_S``. Meanwhile a writer's append waits while its
  client looks for a writable bookie (acknowledged once one takes it), or is refused
  (recorded as failed, never acknowledged), or goes unanswered for at most the workload's
  bounded wait (recorded as unknown).
- **free**: up to ``OLDER_DELETES`` older closed ledgers of the workload (each read whole
  first) and then the ballast are deleted, the foreign file still in place: only the bookie's
  own collection (GC, and the compaction a full disk runs within its space reserve) can give
  the space back. Every bookie must register writable again within the bound, counted from
  the ballast's delete, and be the process it was before the fill. Then the foreign file is
  removed.

Why a ballast: a bookie turns writable again once its disk is below ``diskUsageLwmThreshold``
(0.90), the reserve counted as used, so the deletes must free more than a tenth of each disk
whatever the workload happened to write; an eighth of it, on every bookie, does.

Owns the fault's steps and what each round found (``DiskFullRound``); the processes and disks
are ``cluster.py``'s, the ledgers ``workload.py``'s.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cluster import Cluster
from plan import RunConfig
from support.disks import fill_up
from support.wait import WaitTimeout, wait_until
from workload import Recorder, Workload

from pybkx import errors
from pybkx.meta import MetadataStore, open_metadata_store

logger = logging.getLogger("nemesis")

REGISTERED_S = 30.0
"""Bound on every bookie registering writable before a round (one just restarted after a
``kill`` re-registers once its previous session has expired)."""
CHECKPOINTED_S = 20.0
"""Bound on every bookie's journal letting the ballast go (a checkpoint every
``flushInterval``, 1 s here)."""
READ_ONLY_S = 20.0
"""Bound on every bookie registering read-only once its disk is full."""
BALLAST_SHARE = 8
"""The ballast ledger is this fraction of a disk (1/8)."""
OLDER_DELETES = 10
"""How many of the workload's older closed ledgers a round deletes beside the ballast."""


@dataclass
class DiskFullRound:
    """One ``disk_full`` fault: seconds to read-only after the fill and to writable after the
    deletes, per bookie index; ledgers deleted; the outcomes of the writers' appends sent
    between the fill and the deletes; what went wrong."""

    read_only_s: dict[int, float] = field(default_factory=dict)
    writable_again_s: dict[int, float] = field(default_factory=dict)
    deleted: int = 0
    appends_while_full: dict[str, int] = field(default_factory=dict)
    writable_before_deletes: list[int] = field(default_factory=list)
    """Bookies registered writable again before the round's deletes (the workload's deleter
    deletes meanwhile too): for them the round shows less than it claims."""
    problems: list[str] = field(default_factory=list)
    filled_at: float = 0.0
    """History time (``Recorder.now``) when the fill began."""


class DiskFull:
    """The ``disk_full`` fault over every bookie of ``cluster`` (whose bookies have disks of
    their own): ``fill`` starts it, ``free`` heals it; ``rounds`` holds what each found."""

    def __init__(
        self, cluster: Cluster, workload: Workload, config: RunConfig, rec: Recorder
    ) -> None:
        self.cluster, self.workload, self.config, self.rec = cluster, workload, config, rec
        self.rounds: list[DiskFullRound] = []
        self._round: DiskFullRound | None = None
        self._ballast: list[int] = []
        self._pids: dict[int, int | None] = {}

    def fill(self) -> None:
        """Once every bookie is registered writable, the ballast written on all of them, then
        every disk filled to 100%, then a bounded wait for every bookie to register read-only
        (one that does not is a problem of the round). Raises RuntimeError when a bookie is
        not writable before, BKException or OSError when the ballast or a fill fails (the
        nemesis then calls ``free``, which undoes the fill, and tries again later)."""
        away = self._wait_each(self._writable_and_serving, REGISTERED_S, {})
        if away:
            raise RuntimeError(f"bookies {away} not serving writable before the fill")
        self._pids = {b.index: b.proc.pid if b.proc else None for b in self.cluster.bookies}
        size = (self.config.disk_mib << 20) // BALLAST_SHARE
        self._ballast = [self.workload.write_ballast(size)]
        disks = [b.disk for b in self.cluster.bookies if b.disk is not None]
        assert len(disks) == len(self.cluster.bookies), "disk_full needs disks of their own"
        wait_until(
            lambda: all(journal_bytes(disk) < size // 2 for disk in disks),
            "every bookie's journal letting the ballast go",
            timeout_s=CHECKPOINTED_S,
            interval_s=0.1,
        )
        round_ = DiskFullRound(filled_at=self.rec.now())
        # Until the round's own deletes: a delete of the workload's during the hold would give
        # space back first, and the round would not show what it claims (seen under load).
        self.workload.deletes_held.set()
        for disk in disks:
            fill_up(disk)
        self._round = round_  # a round from here on: ``free`` deletes and waits
        self.rounds.append(round_)
        late = self._wait_each(
            lambda store: store.readonly_bookies(), READ_ONLY_S, round_.read_only_s
        )
        round_.problems += [
            f"bookie{i} not read-only within {READ_ONLY_S:.0f} s of its disk filled to 100%"
            for i in late
        ]
        self.rec.record(
            type="nemesis", ledger=-1, op="read_only", what=round_.read_only_s, late=late
        )

    def free(self) -> None:
        """Deletes the ballast and older closed ledgers, waits (bounded) for every bookie to
        register writable again by itself, checks none was restarted, and removes the foreign
        files. Never raises for what it finds: that goes in the round's problems."""
        round_, self._round = self._round, None
        try:
            if round_ is not None:
                self._free(round_)
            elif self._ballast:  # the fill failed after the ballast: no disk left holding it
                self.workload.delete_for_space(self._ballast, 0, "disk_full")
        except errors.BKException as exc:
            logger.warning("deleting the ballast %s failed: %s", self._ballast, exc)
        finally:
            self._ballast = []
            self.workload.deletes_held.clear()
            for b in self.cluster.bookies:
                b.unfill()

    def _free(self, round_: DiskFullRound) -> None:
        round_.appends_while_full = self._appends_between(round_.filled_at, self.rec.now())
        round_.writable_before_deletes = self._writable_now()
        try:
            deleted = self.workload.delete_for_space(self._ballast, OLDER_DELETES, "disk_full")
        except errors.BKException as exc:
            round_.problems.append(f"the deletes failed: {type(exc).__name__}: {exc}")
            return
        round_.deleted = len(deleted)
        if self._ballast[0] not in deleted:
            round_.problems.append(f"the ballast ledger {self._ballast[0]} was not deleted")
        bound = self.config.writable_again_s
        late = self._wait_each(
            lambda store: store.writable_bookies(), bound, round_.writable_again_s
        )
        round_.problems += [
            f"bookie{i} not writable again within {bound:.0f} s of the deletes (the foreign "
            "file still in place; see its bookie.log)"
            for i in late
        ]
        self.rec.record(
            type="nemesis",
            ledger=-1,
            op="writable_again",
            what=round_.writable_again_s,
            late=late,
            deleted=deleted,
        )
        for b in self.cluster.bookies:
            if not b.alive() or b.proc is None or b.proc.pid != self._pids.get(b.index):
                round_.problems.append(
                    f"bookie{b.index} exited or was restarted during disk_full (see its bookie.log)"
                )

    def _writable_now(self) -> list[int]:
        """The indexes of the bookies registered writable now (none known: an empty list)."""
        try:
            with open_metadata_store(self.cluster.uri, zkTimeout=4000) as store:
                writable = store.writable_bookies()
        except errors.BKException as exc:
            logger.warning("listing the writable bookies failed: %s", exc)
            return []
        return [b.index for b in self.cluster.bookies if b.address in writable]

    def _appends_between(self, since: float, until: float) -> dict[str, int]:
        """Outcomes (ok, fail, unknown) of the appends sent from ``since`` to ``until`` and
        known by now (the writers': the ballast is written before)."""
        with self.rec.lock:
            events = list(self.rec.events)
        outcomes: dict[str, int] = {}
        for e in events:
            if e["type"] == "append" and since <= float(e.get("sent", e["t"])) < until:
                outcomes[str(e["status"])] = outcomes.get(str(e["status"]), 0) + 1
        return outcomes

    def _writable_and_serving(self, store: MetadataStore) -> frozenset[str]:
        """The bookies registered writable whose process serves now and is not paused: a killed
        bookie's registration outlives it until its session expires, and the ballast, written
        to every bookie, would fail on it (seen: no round in a short run)."""
        serving = {b.address for b in self.cluster.bookies if b.serving() and not b.paused}
        return frozenset(store.writable_bookies() & serving)

    def _wait_each(
        self,
        listed: Callable[[MetadataStore], frozenset[str]],
        timeout_s: float,
        seconds: dict[int, float],
    ) -> list[int]:
        """Waits up to ``timeout_s`` for every bookie to be in ``listed`` (its registration),
        noting in ``seconds`` when each first was; the indexes of those never seen."""
        started = time.monotonic()
        pending = {b.index: b.address for b in self.cluster.bookies}
        with open_metadata_store(self.cluster.uri, zkTimeout=4000) as store:

            def all_seen() -> bool:
                now_listed = listed(store)
                for index, address in list(pending.items()):
                    if address in now_listed:
                        seconds[index] = round(time.monotonic() - started, 2)
                        del pending[index]
                return not pending

            with contextlib.suppress(WaitTimeout):  # those left pending are the answer
                wait_until(
                    all_seen,
                    f"bookies {sorted(pending)} registered",
                    timeout_s=timeout_s,
                    interval_s=0.1,
                    ignoring=(errors.BKException,),
                )
        return sorted(pending)


def journal_bytes(disk: Path) -> int:
    """The bytes of the journal files on a bookie's disk (its reserve file left out)."""
    total = 0
    for path in (disk / "journal" / "current").glob("*.txn"):
        with contextlib.suppress(FileNotFoundError):  # removed by a checkpoint meanwhile
            total += path.stat().st_blocks * 512
    return total


def summary(rounds: list[DiskFullRound], bound_s: float) -> str:
    """One line on a run's ``disk_full`` rounds: how many, the slowest turns, the deletes."""
    read_only = [max(r.read_only_s.values(), default=0.0) for r in rounds]
    writable = [max(r.writable_again_s.values(), default=0.0) for r in rounds]
    return (
        f"disk_full rounds {len(rounds)}: the slowest bookie read-only {max(read_only):.1f} s "
        f"after the fill, writable again by itself {max(writable):.1f} s after the deletes "
        f"(bound {bound_s:.0f} s; slowest per round {writable}); ledgers deleted "
        f"{sum(r.deleted for r in rounds)}; writers' appends sent between fill and deletes "
        f"{[r.appends_while_full for r in rounds]}; bookies writable again before the round's "
        f"deletes {[r.writable_before_deletes for r in rounds]}; problems "
        f"{sum(len(r.problems) for r in rounds)}"
    )
