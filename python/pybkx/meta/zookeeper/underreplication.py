"""Under-replication on ZooKeeper in BookKeeper's layout (``<root>/underreplication``), so
that BookKeeper's auditor, workers and shell read pybkx's markers and the reverse: markers at
``ledgers/<4 hex>/<4 hex>/<4 hex>/<4 hex>/urL<%010d>`` holding ``UnderreplicatedLedgerFormat``
as protobuf text, ephemeral locks ``locks/urL<%010d>``, the ``disable`` node,
``lostBookieRecoveryDelay``, the auditor's votes ``auditorelection/V_<seq>``, and the
periodic checks' stamps (``checkallledgersctime`` ... holding ``CheckAllLedgersFormat`` ...
as binary protobuf). It stores and reads them; it never decides what is under-replicated (the
auditor does)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Collection
from contextlib import suppress

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from pybkx.meta import javaformat
from pybkx.meta.coordination import Election
from pybkx.meta.underreplication import CHECK_STAMPS
from pybkx.meta.zookeeper.layout import UNDER_REPLICATION
from pybkx.meta.zookeeper.session import ZkSession, watch_setting

__all__ = ["ZkUnderReplication", "marker_path", "parse_marker", "render_marker"]

LAYOUT_TEXT = 'type: "BASIC"\nversion: 1\n'
_REPLICA_RE = re.compile(r'^\s*replica:\s*"((?:[^"\\]|\\.)*)"\s*$', re.M)
_BOOKIE_ID_RE = re.compile(r'bookieId:\s*"((?:[^"\\]|\\.)*)"')
_MARKER_RE = re.compile(r"urL(\d{10,19})")


def marker_path(base: str, ledger_id: int) -> str:
    """``<base>/ledgers/<bits 63-48>/<47-32>/<31-16>/<15-0>/urL<%010d id>`` (hex groups)."""
    groups = [f"{(ledger_id >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0)]
    return f"{base}/ledgers/{'/'.join(groups)}/urL{ledger_id:010d}"


def render_marker(replicas: Collection[str], ctime_ms: int | None) -> bytes:
    """``UnderreplicatedLedgerFormat`` in protobuf text format."""
    lines = [f'replica: "{_escape(r)}"' for r in replicas]
    if ctime_ms is not None:
        lines.append(f"ctime: {ctime_ms}")
    return ("\n".join(lines) + "\n").encode()


def parse_marker(data: bytes) -> list[str]:
    """The replicas of a marker's protobuf text (other fields ignored)."""
    return [_unescape(m) for m in _REPLICA_RE.findall(data.decode("utf-8", "replace"))]


def render_ctime(ctime_ms: int) -> bytes:
    """``CheckAllLedgersFormat`` (or the placement / replicas one: all three have the stamp as
    field 1, an int64) as binary protobuf."""
    return b"\x08" + javaformat.varint(ctime_ms & 0xFFFFFFFFFFFFFFFF)


def parse_ctime(data: bytes) -> int | None:
    """The stamp of a check's binary protobuf (field 1), None when absent or unreadable."""
    pos, found = 0, None
    try:
        while pos < len(data):
            tag, pos = javaformat.read_varint(data, pos, bits=64)
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                value, pos = javaformat.read_varint(data, pos, bits=64)
                if field == 1:
                    found = value - (1 << 64) if value >= 1 << 63 else value
            elif wire == 2:
                size, pos = javaformat.read_varint(data, pos)
                pos += size
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                return found
    except ValueError:
        return found
    return found


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


class ZkUnderReplication(ZkSession):
    """Markers, their locks, the switch, the delay and the auditor election."""

    def _ur(self, *names: str) -> str:
        return self._path(UNDER_REPLICATION, *names)

    def _ensure_layout(self) -> None:
        layout = self._ur("LAYOUT")
        if not self._exists(layout):
            self._ensure(self._ur())
            with suppress(NodeExistsError):
                self._call(f"create {layout}", self._zk.create, layout, LAYOUT_TEXT.encode())

    def mark_ledger_underreplicated(self, ledger_id: int, missing: Collection[str]) -> None:
        self._ensure_layout()
        path = marker_path(self._ur(), ledger_id)
        while True:
            try:
                data, stat = self._call(f"get {path}", self._zk.get, path)
            except NoNodeError:
                body = render_marker(sorted(set(missing)), int(time.time() * 1000))
                try:
                    self._call(f"create {path}", self._zk.create, path, body, makepath=True)
                    return
                except NodeExistsError:
                    continue
            known = parse_marker(data)
            merged = known + [b for b in sorted(set(missing)) if b not in known]
            if merged == known:
                return
            try:
                self._call(
                    f"set {path}",
                    self._zk.set,
                    path,
                    render_marker(merged, int(time.time() * 1000)),
                    version=stat.version,
                )
                return
            except (BadVersionError, NoNodeError):
                continue

    def underreplicated_ledgers(self) -> dict[int, list[str]]:
        found: dict[int, list[str]] = {}
        self._walk_markers(self._ur("ledgers"), 0, found)
        return found

    def _walk_markers(self, path: str, depth: int, found: dict[int, list[str]]) -> None:
        for child in self._children(path):
            if depth < 4:
                self._walk_markers(f"{path}/{child}", depth + 1, found)
                continue
            match = _MARKER_RE.fullmatch(child)
            if match is None:
                continue
            with suppress(NoNodeError):
                data, _ = self._call(f"get {path}/{child}", self._zk.get, f"{path}/{child}")
                found[int(match.group(1))] = parse_marker(data)

    def lock_underreplicated_ledger(self, ledger_id: int, holder: str) -> int | None:
        path = marker_path(self._ur(), ledger_id)
        if not self.lock_ledger_against_replication(ledger_id, holder):
            return None
        try:
            _, stat = self._call(f"get {path}", self._zk.get, path)
        except NoNodeError:
            self.release_underreplicated_ledger(ledger_id)
            return None
        return int(stat.version)

    def lock_ledger_against_replication(self, ledger_id: int, holder: str) -> bool:
        lock = self._ur("locks", f"urL{ledger_id:010d}")
        try:
            self._call(
                f"create {lock}",
                self._zk.create,
                lock,
                f'bookieId: "{_escape(holder)}"\n'.encode(),
                ephemeral=True,
                makepath=True,
            )
        except NodeExistsError:
            return False
        return True

    def release_underreplicated_ledger(self, ledger_id: int) -> None:
        self._delete_quietly(self._ur("locks", f"urL{ledger_id:010d}"))

    def mark_ledger_replicated(self, ledger_id: int, version: int) -> bool:
        path = marker_path(self._ur(), ledger_id)
        deleted = False
        try:
            self._call(f"delete {path}", self._zk.delete, path, version=version)
            deleted = True
        except (BadVersionError, NoNodeError):
            pass
        if deleted:  # prune the empty hex directories, as BookKeeper does
            parent = path.rsplit("/", 1)[0]
            for _ in range(4):
                try:
                    self._call(f"delete {parent}", self._zk.delete, parent)
                except (NotEmptyError, NoNodeError):
                    break
                parent = parent.rsplit("/", 1)[0]
        self.release_underreplicated_ledger(ledger_id)
        return deleted

    def replication_enabled(self) -> bool:
        return not self._exists(self._ur("disable"))

    def set_replication_enabled(self, enabled: bool) -> None:
        path = self._ur("disable")
        if enabled:
            self._delete_quietly(path)
            return
        self._ensure_layout()
        with suppress(NodeExistsError):
            self._call(f"create {path}", self._zk.create, path, b"")

    def lost_bookie_recovery_delay(self) -> int | None:
        try:
            data, _ = self._call("get delay", self._zk.get, self._ur("lostBookieRecoveryDelay"))
        except NoNodeError:
            return None
        return int(data.decode().strip() or 0)

    def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        path = self._ur("lostBookieRecoveryDelay")
        self._ensure_layout()
        try:
            self._call(f"set {path}", self._zk.set, path, str(int(seconds)).encode())
        except NoNodeError:
            with suppress(NodeExistsError):
                self._call(f"create {path}", self._zk.create, path, str(int(seconds)).encode())

    def lost_bookie_recovery_delay_version(self) -> int | None:
        try:
            _, stat = self._call("get delay", self._zk.get, self._ur("lostBookieRecoveryDelay"))
        except NoNodeError:
            return None
        return int(stat.version) + 1

    def check_ctime(self, name: str) -> int | None:
        if name not in CHECK_STAMPS:
            raise ValueError(f"no check stamp called {name!r}")
        try:
            data, _ = self._call(f"get {name}", self._zk.get, self._ur(name))
        except NoNodeError:
            return None
        return parse_ctime(data)

    def set_check_ctime(self, name: str, ctime_ms: int) -> None:
        if name not in CHECK_STAMPS:
            raise ValueError(f"no check stamp called {name!r}")
        path = self._ur(name)
        self._ensure_layout()
        try:
            self._call(f"set {path}", self._zk.set, path, render_ctime(ctime_ms))
        except NoNodeError:
            with suppress(NodeExistsError):
                self._call(f"create {path}", self._zk.create, path, render_ctime(ctime_ms))

    def auditor_election(self, bookie_id: str) -> Election:
        self._ensure_layout()
        self._ensure(self._ur("auditorelection"))
        return _AuditorElection(self, bookie_id)


class _AuditorElection(Election):
    """BookKeeper's auditor election: ephemeral sequential votes ``V_<seq>`` holding
    ``AuditorVoteFormat`` text; the lowest is the auditor, which writes its vote into the
    ``auditorelection`` node; the others watch the vote just before theirs."""

    def __init__(self, store: ZkUnderReplication, bookie_id: str) -> None:
        self._store = store
        self._vote_text = f'bookieId: "{_escape(bookie_id)}"\n'.encode()
        self._base = store._ur("auditorelection")
        self._cancelled = threading.Event()
        # Set by the watch on the vote before ours (when it goes) and by cancel(): the one
        # thing a waiting run() waits on.
        self._wake = threading.Event()
        self._vote: str | None = None

    def run(self, on_elected: Callable[[], None]) -> None:
        store = self._store
        created = store._call(
            "auditor vote",
            store._zk.create,
            f"{self._base}/V_",
            self._vote_text,
            ephemeral=True,
            sequence=True,
        )
        self._vote = created.rsplit("/", 1)[1]
        try:
            while not self._cancelled.is_set():
                votes = sorted(v for v in store._children(self._base) if v.startswith("V_"))
                if self._vote not in votes:
                    return  # the session ended: the vote went with it
                mine = votes.index(self._vote)
                if mine == 0:
                    with suppress(NoNodeError):
                        store._call("auditor", store._zk.set, self._base, self._vote_text)
                    on_elected()
                    return
                self._wake.clear()  # before the watch is set, so its firing is not lost
                before = f"{self._base}/{votes[mine - 1]}"
                watch = watch_setting(self._wake)
                exists = store._call(f"watch {before}", store._zk.exists, before, watch=watch)
                if exists and not self._cancelled.is_set():
                    self._wake.wait()
        finally:
            with suppress(Exception):
                store._delete_quietly(f"{self._base}/{self._vote}")

    def leader(self) -> str | None:
        store = self._store
        votes = sorted(v for v in store._children(self._base) if v.startswith("V_"))
        for vote in votes:
            with suppress(NoNodeError):
                data, _ = store._call("auditor vote", store._zk.get, f"{self._base}/{vote}")
                match = _BOOKIE_ID_RE.search(data.decode("utf-8", "replace"))
                return _unescape(match.group(1)) if match else None
        return None

    def cancel(self) -> None:
        self._cancelled.set()
        self._wake.set()
