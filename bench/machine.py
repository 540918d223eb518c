"""What the machine can do and what a process costs: the disk's sequential write + fdatasync
limit, its sequential read (through the page cache and direct), loopback TCP bandwidth, the
machine description, and a process's CPU time and peak RSS read from /proc.

Owns measuring the machine itself; it never starts bookies or sends BookKeeper traffic, and it
only reads /proc of the processes it is given.
"""

from __future__ import annotations

import mmap
import os
import platform
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20
PREALLOC_BYTES = 16 << 20  # journalPreAllocSizeMB default: the journal grows its file likewise


# --- processes ---------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the command name (which may hold spaces) start at field 3 (state).
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLOCK_TICKS


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent busy (not idle, not waiting for I/O) since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / CLOCK_TICKS


def memory_kib(pid: int) -> dict[str, int]:
    """``VmHWM`` (peak RSS) and ``VmRSS`` of process ``pid``, in KiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0])
    return out


def wait_quiet(
    pids: list[int], busy_fraction: float = 0.03, window_s: float = 0.5, max_wait_s: float = 8.0
) -> float:
    """Wait until the processes together use less than ``busy_fraction`` of one core over
    ``window_s`` (background flushes of the last run are done), at most ``max_wait_s``.
    Returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < max_wait_s:
        before = sum(cpu_seconds(p) for p in pids)
        time.sleep(window_s)
        if sum(cpu_seconds(p) for p in pids) - before < busy_fraction * window_s:
            break
    return time.monotonic() - started


# --- disk ------------------------------------------------------------------------------------


@dataclass
class DiskResult:
    chunk_bytes: int
    seconds: float
    writes: int

    @property
    def syncs_per_s(self) -> float:
        return self.writes / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.syncs_per_s * self.chunk_bytes / 1e6


def disk_write_fdatasync(directory: Path, chunk_bytes: int, seconds: float) -> DiskResult:
    """Sequential ``os.write`` of ``chunk_bytes`` + ``os.fdatasync`` per write into a new file in
    ``directory``, grown by ``posix_fallocate`` in 16 MiB steps as the journal grows its own."""
    chunk = os.urandom(chunk_bytes)
    path = directory / f"disk-baseline-{os.getpid()}.dat"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        allocated = written = writes = 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            if written + chunk_bytes > allocated:
                os.posix_fallocate(fd, allocated, max(PREALLOC_BYTES, chunk_bytes))
                allocated += max(PREALLOC_BYTES, chunk_bytes)
            written += os.write(fd, chunk)
            os.fdatasync(fd)
            writes += 1
        return DiskResult(chunk_bytes, time.perf_counter() - started, writes)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def disk_write_synced_once(directory: Path, nbytes: int, block_bytes: int) -> float:
    """Seconds to write ``nbytes`` sequentially (``block_bytes`` per write, at least one write)
    into a new file in ``directory`` and fdatasync it once at the end: what a journal or an
    entry log must write in bulk. The file is removed."""
    block = os.urandom(block_bytes)
    path = directory / "disk-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(max(1, nbytes // block_bytes)):
            os.write(fd, block)
        os.fdatasync(fd)
        return time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()


def disk_read_buffered(path: Path) -> float:
    """MiB/s of a sequential read of ``path`` as an application reads a file: through the page
    cache (dropped first), the kernel reading ahead, 4 MiB per read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        total = 0
        started = time.perf_counter()
        while chunk := os.read(fd, 4 * MIB):
            total += len(chunk)
        return total / MIB / (time.perf_counter() - started)
    finally:
        os.close(fd)


def disk_read_direct(path: Path, chunk_bytes: int = 4 << 20, in_flight: int = 4) -> float:
    """MiB/s of a sequential read of ``path`` with ``O_DIRECT``: ``chunk_bytes`` requests,
    ``in_flight`` of them at a time (threads; ``preadv`` releases the GIL), so what is measured is
    the device, not the page cache's read-ahead. Raises ``OSError`` where the file system refuses
    ``O_DIRECT``."""
    size = path.stat().st_size
    offsets = list(range(0, size, chunk_bytes))
    # Anonymous mappings are page-aligned, as O_DIRECT needs; reader t owns buffer t and reads
    # chunks t, t + in_flight, ...
    buffers = [mmap.mmap(-1, chunk_bytes) for _ in range(in_flight)]
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:

        def reader(t: int) -> int:
            return sum(
                os.preadv(fd, [buffers[t]], offsets[i]) for i in range(t, len(offsets), in_flight)
            )

        started = time.perf_counter()
        with ThreadPoolExecutor(in_flight) as pool:
            total = sum(pool.map(reader, range(in_flight)))
        return total / MIB / (time.perf_counter() - started)
    finally:
        os.close(fd)
        for b in buffers:
            b.close()


def drop_cache(root: Path) -> None:
    """Evict the files under ``root`` from the page cache (written data is synced first), so
    that the next reads of them come from the disk."""
    for path in root.rglob("*"):
        if path.is_file():
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # removed since listed (an open storage merges its index files)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# --- network ---------------------------------------------------------------------------------


def loopback_bandwidth(seconds: float, chunk_bytes: int = 1 << 20) -> float:
    """Bytes/s one TCP connection on 127.0.0.1 carries (sender and receiver threads)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received = [0]

    def receive() -> None:
        conn, _ = listener.accept()
        buf = bytearray(chunk_bytes)
        with conn:
            while n := conn.recv_into(buf):
                received[0] += n

    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()
    payload = os.urandom(chunk_bytes)
    with socket.create_connection(("127.0.0.1", port)) as sender:
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            sender.sendall(payload)
        sender.shutdown(socket.SHUT_WR)
        receiver.join(timeout=10)
        elapsed = time.perf_counter() - started
    listener.close()
    return received[0] / elapsed


# --- description -----------------------------------------------------------------------------


def _first_line(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "?"


def describe(directory: Path) -> dict[str, str]:
    """The machine a result was measured on."""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    df = subprocess.run(
        ["df", "--output=source,fstype", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    device = df[1].split() if len(df) > 1 else ["?", "?"]
    return {
        "host": platform.node(),
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "memory": f"{mem_kib / (1 << 20):.1f} GiB",
        "kernel": f"{platform.system()} {platform.release()}",
        "disk": f"{device[0]} ({device[1] if len(device) > 1 else '?'}) at {directory}",
        "python": platform.python_version(),
        "java": _first_line(["java", "-version"]),
    }
