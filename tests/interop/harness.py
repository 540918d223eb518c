"""Process management for runs against the real Apache BookKeeper: the Java helper build,
ZooKeeper, a Java bookie and a pybkx bookie. Used by the interop fixtures and the benchmarks.

Owns starting, waiting for and stopping processes (every one logs to a file); it never decides
what to send to them or what to expect. Failures raise HarnessError with the log's tail.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The benchmarks import this module with only tests/interop on sys.path; the shared test
# support (waiting, ports) lives in tests/support. `accepts` and `free_port` stay names of this
# module: the benchmarks call them through it.
if str(REPO / "tests") not in sys.path:
    sys.path.append(str(REPO / "tests"))

from support import wait  # noqa: E402
from support.ports import accepts_tcp as accepts  # noqa: E402
from support.ports import free_port, zookeeper_answers  # noqa: E402

JAVA_PROJECT = Path(__file__).resolve().parent / "java"
BUILD_DIR = REPO / "target" / "interop-java"  # outside the source tree, ignored by git
STARTUP_TIMEOUT = 60.0

# The JVM flags BookKeeper's launch scripts use on JDK 17, plus a small footprint.
JVM_OPTS = [
    "-XX:+UseSerialGC",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util.zip=ALL-UNNAMED",
    # PYBKX_INTEROP_JAVA_LOG=info (or debug) makes the Java side verbose.
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=" + os.environ.get("PYBKX_INTEROP_JAVA_LOG", "warn"),
]


class HarnessError(Exception):
    """A process could not be built, started or stopped as expected."""


class Process:
    """A child process whose stdout and stderr go to ``log``."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log: Path,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log = log
        with log.open("ab") as out:
            self.popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env=env,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError as exc:
            return f"(cannot read {self.log}: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def error(self, message: str) -> HarnessError:
        return HarnessError(
            f"{self.name}: {message} (exit code {self.popen.poll()}); log {self.log}, "
            f"last lines:\n{self.tail()}"
        )

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


def wait_until(process: Process, ready: Callable[[], bool], what: str) -> None:
    """Wait until ``ready()``; raises HarnessError if the process dies or time runs out (then
    the process is stopped)."""

    def ready_while_alive() -> bool:
        if not process.alive():
            raise process.error(f"exited before {what}")
        return ready()

    try:
        wait.wait_until(ready_while_alive, what, timeout_s=STARTUP_TIMEOUT, interval_s=0.2)
    except wait.WaitTimeout:
        process.stop()
        raise process.error(f"not {what} after {STARTUP_TIMEOUT:.0f} s") from None


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise HarnessError(f"`{name}` is needed (JDK 17 and Maven) but is not on PATH")
    return path


def _java_sources_hash() -> str:
    digest = hashlib.sha256()
    files = [JAVA_PROJECT / "pom.xml", *sorted((JAVA_PROJECT / "src").rglob("*"))]
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(JAVA_PROJECT)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def java_classpath(build_dir: Path = BUILD_DIR) -> str:
    """Classpath of the Java helpers and BookKeeper, built with Maven once per source change.

    The build goes to ``build_dir`` (target/interop-java) with a stamp holding the hash of the
    pom and the sources; an unchanged hash skips Maven. A benchmark may build into a directory
    of its own, so its rebuild never replaces the jar under a running test session.
    """
    tool("java")
    build_dir.mkdir(parents=True, exist_ok=True)
    jar, classpath_file, stamp = (
        build_dir / "pybkx-interop.jar",
        build_dir / "classpath.txt",
        build_dir / "sources.sha256",
    )
    with (build_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (parallel sessions)
        wanted = _java_sources_hash()
        fresh = jar.exists() and classpath_file.exists() and stamp.exists()
        if not fresh or stamp.read_text().strip() != wanted:
            stamp.unlink(missing_ok=True)
            argv = [
                tool("mvn"),
                "-q",
                "-B",
                "-Dstyle.color=never",
                f"-Dinterop.build.dir={build_dir}",
                f"-Dmdep.outputFile={classpath_file}",
                "clean",
                "package",
                "dependency:build-classpath",
            ]
            build = subprocess.run(
                argv, cwd=JAVA_PROJECT, capture_output=True, text=True, timeout=1800, check=False
            )
            if build.returncode != 0 or not jar.exists():
                output = "\n".join((build.stdout + build.stderr).splitlines()[-60:])
                raise HarnessError(
                    f"Maven build of {JAVA_PROJECT} failed (exit {build.returncode}):\n{output}"
                )
            stamp.write_text(wanted + "\n")
    return f"{jar}{os.pathsep}{classpath_file.read_text().strip()}"


def java_argv(
    classpath: str,
    main: str,
    *args: str,
    heap: str = "128m",
    jvm_options: Sequence[str] = (),
    system_properties: Mapping[str, str] | None = None,
) -> list[str]:
    """The command line running ``main``; ``jvm_options`` are more JVM flags and
    ``system_properties`` become ``-Dkey=value`` (e.g. ``java.security.auth.login.config``,
    which BookKeeper reads from the JVM, not its conf)."""
    props = [f"-D{key}={value}" for key, value in (system_properties or {}).items()]
    return [
        tool("java"), f"-Xmx{heap}", *JVM_OPTS, *jvm_options, *props, "-cp", classpath, main,
        *args,
    ]  # fmt: skip


def start_zookeeper(classpath: str, workdir: Path) -> tuple[Process, str]:
    """A standalone ZooKeeper (from BookKeeper's classpath) on loopback, and its address."""
    port = free_port()
    data = workdir / "zookeeper"
    data.mkdir(parents=True)
    config = workdir / "zoo.cfg"
    config.write_text(
        "tickTime=500\n"
        "initLimit=10\n"
        "syncLimit=5\n"
        f"dataDir={data}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok\n"
    )
    argv = java_argv(classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", str(config))
    process = Process("zookeeper", argv, workdir / "zookeeper.log")
    wait_until(process, lambda: zookeeper_answers(port), "answering ruok")
    return process, f"127.0.0.1:{port}"


def start_java_bookie(
    classpath: str,
    zookeeper: str,
    workdir: Path,
    *overrides: str,
    heap: str = "256m",
    jvm_options: Sequence[str] = (),
    system_properties: Mapping[str, str] | None = None,
) -> tuple[Process, str]:
    """A real Apache BookKeeper bookie (metadata in ``zookeeper``) and its address.

    ``overrides`` are ``key=value`` bookie settings; ``jvm_options`` more JVM flags,
    ``system_properties`` the JVM's.
    """
    port = free_port()
    argv = java_argv(
        classpath,
        "pybkx.interop.JavaBookie",
        str(port),
        zookeeper,
        str(workdir / "java-bookie"),
        *overrides,
        heap=heap,
        jvm_options=jvm_options,
        system_properties=system_properties,
    )
    process = Process("java-bookie", argv, workdir / "java-bookie.log")

    def ready() -> bool:
        return "READY" in process.log.read_text(errors="replace") and accepts(port)

    wait_until(process, ready, "serving")
    return process, f"127.0.0.1:{port}"


def fresh_zookeeper_root(zookeeper: str, prefix: str) -> str:
    """Create an empty, uniquely named ZooKeeper path ``/<prefix>-<hex>`` and return it.

    Java bookies given ``zookeeper + root`` create ``<root>/ledgers`` but not ``<root>``
    itself. A root of its own keeps a test's bookies apart from every other bookie of the
    session (a ledger with an ensemble of one can only land on the bookie the test meant).
    """
    from kazoo.client import KazooClient  # only the tests need kazoo; the benchmarks do not

    root = f"/{prefix}-{uuid.uuid4().hex}"
    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=30)
    try:
        zk.ensure_path(root)
    finally:
        zk.stop()
        zk.close()
    return root


def start_java_cluster(
    classpath: str, zookeeper: str, workdir: Path, prefix: str, bookies: int
) -> tuple[list[Process], str]:
    """``bookies`` Java bookies under a fresh ZooKeeper root: the processes (all stopped again
    if one fails to start) and the metadata service URI."""
    root = fresh_zookeeper_root(zookeeper, prefix)
    started: list[Process] = []
    try:
        for i in range(bookies):
            bookie_dir = workdir / f"{root[1:]}-{i}"
            bookie_dir.mkdir()
            process, _ = start_java_bookie(classpath, zookeeper + root, bookie_dir)
            started.append(process)
    except HarnessError:
        for process in started:
            process.stop()
        raise
    return started, f"zk+hierarchical://{zookeeper}{root}/ledgers"


def start_pybkx_bookie(
    workdir: Path, extra_conf: str = "", pythonpath: Path | None = None
) -> tuple[Process, str]:
    """A pybkx bookie (``pybkx bookie --conf``, standalone) and its address.

    ``extra_conf`` is appended to its properties file. ``pythonpath``: run the pybkx package
    found there (another build) instead of this one.
    """
    executable = Path(sys.executable).with_name("pybkx")
    if not executable.exists():
        executable = Path(tool("pybkx"))
    port = free_port()
    data = workdir / "pybkx-bookie"
    config = workdir / "pybkx-bookie.conf"
    config.write_text(
        f"bookiePort={port}\n"
        f"journalDirectories={data / 'journal'}\n"
        f"ledgerDirectories={data / 'ledgers'}\n"
        "listeningInterface=lo\n"  # loopback only, as the Java bookie
        "allowLoopback=true\n" + extra_conf
    )
    argv = [str(executable), "bookie", "--conf", str(config)]
    env = None
    if pythonpath is not None:
        argv = [sys.executable, "-m", "pybkx", "bookie", "--conf", str(config)]
        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    process = Process("pybkx-bookie", argv, workdir / "pybkx-bookie.log", env=env)
    wait_until(process, lambda: accepts(port), "accepting connections")
    return process, f"127.0.0.1:{port}"
