"""A local cluster for development and tests: N ``pybkx bookie`` processes over one metadata store.
It starts, watches and stops only the processes it spawned; it must never touch their files."""

# Like BookKeeper's ``localbookie``, but every bookie is a real process (``python -m pybkx bookie
# --conf <generated file>``) on 127.0.0.1, so killing one is a real crash. Layout of the sandbox
# directory:
#
#   metadata/               the embedded metadata store (unless a ZooKeeper URI is given)
#   bookie-<i>/bk_server.conf
#   bookie-<i>/journal/  bookie-<i>/ledgers/
#   bookie-<i>/bookie.log   the bookie's stdout and stderr (appended across restarts)
#
# A kept directory (``directory=``) can be started again: each bookie reuses the port in its
# generated configuration, so its cookie still matches.

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Final

from pybkx import errors
from pybkx.config import PROMETHEUS_STATS_PROVIDER, ConfigError, ServerConfig
from pybkx.config.zk_security import ZK_SECURITY_KEYS
from pybkx.meta import MetadataStore, open_metadata_store
from pybkx.meta.discovery import clear_sandbox_record, record_sandbox

__all__ = [
    "DEFAULT_BOOKIES",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "Sandbox",
    "SandboxError",
    "zk_uri_from",
]

logger = logging.getLogger(__name__)

DEFAULT_BOOKIES: Final = 3
START_TIMEOUT_S: Final = 60.0
"""How long ``start``/``restart_bookie`` wait for bookies to register."""
STOP_TIMEOUT_S: Final = 15.0
"""How long a stop waits after SIGTERM before SIGKILL."""
HOST: Final = "127.0.0.1"
SANDBOX_RESERVE_MB = 8
"""The space reserve (``diskReservedSpaceMB``) of each sandbox bookie's directories."""
MAX_BOOKIES: Final = 100

_POLL_S: Final = 0.05
_RUN_POLL_S: Final = 0.5
_CONF_NAME: Final = "bk_server.conf"
_LOG_NAME: Final = "bookie.log"
_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


class SandboxError(Exception):
    """The sandbox could not start, or a bookie could not be (re)started; one line."""


def zk_uri_from(value: str) -> str:
    """A metadata service URI from ``--zk``: a URI as is, or ``host:port[,host:port]`` (the
    ZooKeeper connect string) as ``zk+hierarchical://host:port[;host:port]/ledgers``."""
    if "://" in value:
        return value
    return f"zk+hierarchical://{value.replace(',', ';')}/ledgers"


def _escape_property(value: str) -> str:
    """A value for a properties file: backslashes and leading blanks survive parsing."""
    escaped = value.replace("\\", "\\\\")
    return "\\" + escaped if escaped[:1] in (" ", "\t") else escaped


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on the loopback address right now."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((HOST, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _last_line(path: Path, *, fallback: bool = True) -> str | None:
    """The bookie's failure line (``Error: ...``) or, with ``fallback``, its last log line."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)" if fallback else None
    for line in reversed(lines):
        if line.startswith("Error: "):
            return line
    if not fallback:
        return None
    return lines[-1] if lines else "(empty log)"


def _describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class _Slot:
    """One bookie of the sandbox: where it lives and its current process."""

    index: int
    port: int
    directory: Path
    http_port: int
    """Its admin HTTP server (``/metrics`` and BookKeeper's admin API)."""
    process: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    reported: bool = False
    """Its unexpected exit was already returned by ``poll()``."""
    stopping: bool = False
    """The sandbox itself stopped or killed it (the exit is expected)."""
    exit_codes: list[int] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def conf_path(self) -> Path:
        return self.directory / _CONF_NAME

    @property
    def log_path(self) -> Path:
        return self.directory / _LOG_NAME

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Sandbox:
    """A local cluster: ``bookies`` bookie processes on 127.0.0.1 sharing one metadata store.

    ``Sandbox(3).start()`` (or ``with Sandbox(3) as sandbox:``) initialises the cluster,
    starts every bookie and returns once all are registered as writable; ``stop()`` stops them
    (SIGTERM, then SIGKILL after ``stop_timeout_s``) and removes the directory unless one was
    given. ``zk_uri`` selects ZooKeeper (``zk+hierarchical://host:port/ledgers``) instead of the
    embedded store in the sandbox directory. ``conf`` adds BookKeeper keys to every bookie's
    configuration (e.g. ``{"zkTimeout": 2000}``). Not thread-safe: drive it from one thread.
    """

    def __init__(
        self,
        bookies: int = DEFAULT_BOOKIES,
        *,
        zk_uri: str | None = None,
        directory: str | Path | None = None,
        base_port: int | None = None,
        conf: Mapping[str, object] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        stop_timeout_s: float = STOP_TIMEOUT_S,
    ) -> None:
        if not 1 <= bookies <= MAX_BOOKIES:
            raise ValueError(f"bookies must be between 1 and {MAX_BOOKIES}, got {bookies}")
        if base_port is not None and not 1 <= base_port <= 65535 - bookies + 1:
            raise ValueError(f"base_port {base_port} leaves no room for {bookies} bookies")
        self.bookies = bookies
        self.zk_uri = None if zk_uri is None else zk_uri_from(zk_uri)
        self.base_port = base_port
        self.conf: dict[str, object] = dict(conf or {})
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._keep_directory = directory is not None
        self._directory: Path | None = None if directory is None else Path(directory).resolve()
        self._slots: list[_Slot] = []
        self._store: MetadataStore | None = None

    # --- state

    @property
    def directory(self) -> Path:
        """The sandbox directory (a temporary one exists only while started)."""
        if self._directory is None:
            raise SandboxError("the sandbox is not started")
        return self._directory

    @property
    def metadata_uri(self) -> str:
        """The ``metadataServiceUri`` every bookie uses; give it to a client."""
        return self.zk_uri or f"embedded://{self.directory / 'metadata'}"

    @property
    def bookie_addresses(self) -> list[str]:
        """``host:port`` of every bookie (also its bookie id), by index, running or not."""
        return [slot.address for slot in self._slots]

    @property
    def admin_urls(self) -> list[str]:
        """``http://host:port`` of every bookie's admin HTTP server, by index (``https`` when
        ``conf`` turns on ``httpServerTlsEnable``)."""
        tls = str(self.conf.get("httpServerTlsEnable", "")).strip().lower() == "true"
        scheme = "https" if tls else "http"
        return [f"{scheme}://{HOST}:{slot.http_port}" for slot in self._slots]

    @property
    def metadata_store(self) -> MetadataStore:
        """The sandbox's own session on the metadata store (for inspection)."""
        if self._store is None:
            raise SandboxError("the sandbox is not started")
        return self._store

    @property
    def running(self) -> bool:
        return self._store is not None

    def log_path(self, index: int) -> Path:
        """The log file of bookie ``index`` (stdout and stderr, appended across restarts)."""
        return self._slot(index).log_path

    def is_alive(self, index: int) -> bool:
        """True while bookie ``index``'s process runs."""
        return self._slot(index).alive()

    def pid(self, index: int) -> int | None:
        """The process id of bookie ``index`` while it runs."""
        slot = self._slot(index)
        return slot.process.pid if slot.process is not None and slot.alive() else None

    # --- life cycle

    def start(self) -> None:
        """Create the directory, initialise the cluster, start every bookie and wait until all
        are registered as writable. Raises SandboxError (everything started is stopped again)
        naming the bookie that failed and its last log line; MetaStoreException if the store
        cannot be reached."""
        if self._store is not None:
            raise SandboxError("the sandbox is already started")
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="pybkx-sandbox-")).resolve()
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
            self._slots = self._plan_slots()
            store = open_metadata_store(self.metadata_uri, **self._store_conf())
            self._store = store
            if store.init_new_cluster():
                logger.info("initialised a new cluster at %s", self.metadata_uri)
            for slot in self._slots:
                self._write_conf(slot)
                self._launch(slot)
            self._wait_registered(self._slots, read_only=False)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every bookie (SIGTERM; SIGKILL after ``stop_timeout_s``), close the store and
        remove a temporary directory. Idempotent; never raises for a bookie that misbehaves."""
        self._terminate([slot for slot in self._slots if slot.alive()], signal.SIGTERM)
        for slot in self._slots:
            self._close_log(slot)
        if self._store is not None:
            store, self._store = self._store, None
            try:
                store.close()
            except Exception as exc:
                logger.warning("closing the metadata store failed: %s: %s", type(exc).__name__, exc)
        if not self._keep_directory and self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def kill_bookie(self, index: int, sig: signal.Signals = signal.SIGKILL) -> int:
        """Send ``sig`` (SIGKILL: a crash) to bookie ``index`` and wait until it exited;
        return its exit code (negative: the signal). SIGKILL follows after ``stop_timeout_s``.
        Its registration then goes away like a real crashed bookie's (at once with the embedded
        store, after the ZooKeeper session timeout with ZooKeeper). Raises SandboxError if it
        is not running."""
        slot = self._slot(index)
        if not slot.alive():
            raise SandboxError(f"bookie {index} ({slot.address}) is not running")
        self._terminate([slot], sig)
        return slot.exit_codes[-1]

    def stop_bookie(self, index: int) -> int:
        """Stop bookie ``index`` cleanly (SIGTERM: it unregisters and drains); its exit code."""
        return self.kill_bookie(index, signal.SIGTERM)

    def restart_bookie(self, index: int, *, wait: bool = True) -> None:
        """Start bookie ``index`` again on the same port and directories (stopping it cleanly
        first if it runs); with ``wait``, return once it is registered as writable. Raises
        SandboxError if it exits or does not register within ``start_timeout_s``."""
        if self._store is None:
            raise SandboxError("the sandbox is not started")
        slot = self._slot(index)
        if slot.alive():
            self.stop_bookie(index)
        self._close_log(slot)
        self._launch(slot)
        if wait:
            self._wait_registered([slot], read_only=False)

    def wait_registered(
        self, indexes: Iterable[int] | None = None, *, read_only: bool = False
    ) -> None:
        """Wait until the bookies (all by default) are registered, writable or read-only.
        Raises SandboxError if one exits or ``start_timeout_s`` passes."""
        slots = self._slots if indexes is None else [self._slot(i) for i in indexes]
        self._wait_registered(slots, read_only=read_only)

    def wait_unregistered(self, indexes: Iterable[int], timeout_s: float | None = None) -> None:
        """Wait until none of the bookies is registered (writable or read-only). Raises
        SandboxError after ``timeout_s`` (default ``start_timeout_s``)."""
        ids = {self._slot(i).address for i in indexes}
        deadline = time.monotonic() + (self.start_timeout_s if timeout_s is None else timeout_s)
        store = self.metadata_store
        while True:
            left = ids & (store.writable_bookies() | store.readonly_bookies())
            if not left:
                return
            if time.monotonic() > deadline:
                raise SandboxError(f"bookies {','.join(sorted(left))} are still registered")
            time.sleep(_POLL_S)

    def poll(self) -> list[tuple[int, int]]:
        """Bookies that exited without the sandbox asking, as ``(index, exit code)``; each
        exit is returned once."""
        died: list[tuple[int, int]] = []
        for slot in self._slots:
            if slot.process is None or slot.stopping or slot.reported:
                continue
            code = slot.process.poll()
            if code is not None:
                slot.reported = True
                slot.exit_codes.append(code)
                died.append((slot.index, code))
        return died

    def run(self, report: Callable[[str], None]) -> int:
        """The whole life of ``pybkx sandbox``: start, report the metadata URI and the bookie
        addresses, report bookies that die, stop on SIGTERM or SIGINT; return 0.

        Must run in the main thread (signal handlers). Raises SandboxError on a failed start.
        """
        stop_requested = threading.Event()
        received: list[str] = []

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if not stop_requested.is_set():
                received.append(signal.Signals(signum).name)
            stop_requested.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
        try:
            self.start()
            record_sandbox(self.metadata_uri)  # clients with no URI find this cluster
            kept = "kept" if self._keep_directory else "removed on exit"
            report(f"sandbox directory: {self.directory} ({kept})")
            report(f"metadataServiceUri={self.metadata_uri}")
            for slot in self._slots:
                report(
                    f"bookie {slot.index}: {slot.address} admin http://{HOST}:{slot.http_port} "
                    f"(log {slot.log_path})"
                )
            report(f"sandbox ready: {self.bookies} bookies registered; Ctrl-C to stop")
            while not stop_requested.wait(_RUN_POLL_S):
                for index, code in self.poll():
                    if stop_requested.is_set():
                        break
                    slot = self._slots[index]
                    reason = _last_line(slot.log_path, fallback=False)
                    report(
                        f"bookie {index} ({slot.address}) died unexpectedly "
                        f"({_describe_exit(code)}){': ' + reason if reason else ''}; "
                        f"log {slot.log_path}"
                    )
            report(f"stopping the sandbox ({received[0] if received else 'signal'})")
        finally:
            try:
                clear_sandbox_record()
                self.stop()
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        report("sandbox stopped")
        return 0

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- helpers

    def _slot(self, index: int) -> _Slot:
        if not 0 <= index < len(self._slots):
            raise SandboxError(f"no bookie {index}: the sandbox has {len(self._slots)}")
        return self._slots[index]

    def _store_conf(self) -> dict[str, object]:
        """The sandbox's own session as its bookies open theirs: ``zkTimeout`` and ZooKeeper's
        security keys (with ``zkEnableSecurity`` the cluster's znodes are created under the
        bookies' identity)."""
        # Only these keys: any other bad value is the bookies' to report, as before.
        keys = ("zkTimeout", *ZK_SECURITY_KEYS)
        given = {key: value for key, value in self.conf.items() if key in keys}
        conf = ServerConfig().with_overrides(given, source="sandbox configuration")
        return {"zkTimeout": conf.zk_timeout_ms, **conf.zk_security_settings()}

    def _plan_slots(self) -> list[_Slot]:
        """A slot per bookie: ``base_port + i``, else the port of a kept configuration, else a
        free port; its admin HTTP port likewise kept, else free."""
        directory = self.directory
        dirs = [directory / f"bookie-{i}" for i in range(self.bookies)]
        ports: list[int | None] = []
        http_ports: list[int | None] = []
        for i, bookie_dir in enumerate(dirs):
            kept = self._kept_ports(bookie_dir / _CONF_NAME)
            ports.append(self.base_port + i if self.base_port is not None else kept[0])
            http_ports.append(kept[1])
        wanted = sum(1 for p in ports + http_ports if p is None)
        fresh = iter(_free_ports(wanted))
        return [
            _Slot(
                i,
                port if port is not None else next(fresh),
                bookie_dir,
                http_port if http_port is not None else next(fresh),
            )
            for i, (port, http_port, bookie_dir) in enumerate(
                zip(ports, http_ports, dirs, strict=True)
            )
        ]

    @staticmethod
    def _kept_ports(conf_path: Path) -> tuple[int | None, int | None]:
        """The bookie and admin HTTP ports of a kept configuration."""
        if not conf_path.exists():
            return None, None
        try:
            kept = ServerConfig.from_file(conf_path, lenient=True)
        except ConfigError as exc:
            raise SandboxError(f"cannot reuse {conf_path}: {exc}") from None
        return kept.bookie_port, kept.http_server_port if kept.http_server_enabled else None

    def _write_conf(self, slot: _Slot) -> None:
        settings: dict[str, object] = {
            "bookiePort": slot.port,
            "listeningInterface": HOST,
            "allowLoopback": "true",
            "journalDirectories": str(slot.directory / "journal"),
            "ledgerDirectories": str(slot.directory / "ledgers"),
            "metadataServiceUri": self.metadata_uri,
            "journalPreAllocSizeMB": 1,
            # A local cluster's bookies share one disk: a small space reserve each, not the
            # derived size (hundreds of MiB per bookie) a bookie of its own disk keeps.
            "diskReservedSpaceMB": SANDBOX_RESERVE_MB,
            "httpServerEnabled": "true",
            "httpServerHost": HOST,
            "httpServerPort": slot.http_port,
            "statsProviderClass": PROMETHEUS_STATS_PROVIDER,
            **self.conf,
        }
        lines = [f"# pybkx sandbox bookie {slot.index}: generated, rewritten on every start"]
        lines += [f"{key}={_escape_property(str(value))}" for key, value in settings.items()]
        slot.directory.mkdir(parents=True, exist_ok=True)
        slot.conf_path.write_text("\n".join(lines) + "\n")

    def _launch(self, slot: _Slot) -> None:
        slot.log_file = slot.log_path.open("ab")
        command = [sys.executable, "-m", "pybkx", "bookie", "--conf", str(slot.conf_path)]
        slot.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=slot.log_file, stderr=subprocess.STDOUT
        )
        slot.stopping = slot.reported = False
        logger.info("started bookie %d (%s) pid %d", slot.index, slot.address, slot.process.pid)

    def _terminate(self, slots: list[_Slot], sig: signal.Signals) -> None:
        """Signal every slot's process, wait up to ``stop_timeout_s`` (all together), SIGKILL
        the rest and reap them all."""
        for slot in slots:
            slot.stopping = True
            assert slot.process is not None
            with contextlib.suppress(ProcessLookupError):
                slot.process.send_signal(sig)
        deadline = time.monotonic() + self.stop_timeout_s
        for slot in slots:
            assert slot.process is not None
            try:
                code = slot.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning(
                    "bookie %d (%s) still running %.0fs after %s: SIGKILL",
                    slot.index,
                    slot.address,
                    self.stop_timeout_s,
                    sig.name,
                )
                slot.process.kill()
                code = slot.process.wait()
            slot.exit_codes.append(code)
            self._close_log(slot)

    @staticmethod
    def _close_log(slot: _Slot) -> None:
        if slot.log_file is not None:
            slot.log_file.close()
            slot.log_file = None

    def _wait_registered(self, slots: list[_Slot], *, read_only: bool) -> None:
        store = self.metadata_store
        deadline = time.monotonic() + self.start_timeout_s
        kind = "read-only" if read_only else "writable"
        while True:
            for slot in slots:
                if slot.process is None or slot.process.poll() is not None:
                    how = "not started"
                    if slot.process is not None:
                        how = _describe_exit(slot.process.returncode)
                    raise SandboxError(
                        f"bookie {slot.index} ({slot.address}) ended before registering "
                        f"({how}): {_last_line(slot.log_path)}"
                    )
            try:
                registered = store.readonly_bookies() if read_only else store.writable_bookies()
            except errors.MetaStoreException as exc:
                raise SandboxError(f"cannot read registrations: {exc}") from None
            waiting = [slot for slot in slots if slot.address not in registered]
            if not waiting:
                return
            if time.monotonic() > deadline:
                names = ", ".join(f"{s.index} ({s.address})" for s in waiting)
                raise SandboxError(
                    f"bookies {names} not registered as {kind} after {self.start_timeout_s:.0f}s"
                    f"; see {waiting[0].log_path}"
                )
            time.sleep(_POLL_S)
