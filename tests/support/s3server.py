"""The S3-compatible server of the object-storage tests: S3Proxy (Apache-2.0, from Maven Central)
over jclouds' filesystem backend, on a free loopback port with a temporary directory. Owns
installing it (the classpath, cached under target/s3proxy/), starting and stopping it only.

Run ``python -m support.s3server install`` from ``tests/`` to install it ahead of the tests
(``make s3-server``); the fixture installs it too when the cache is missing or stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.ports import free_port
from support.wait import WaitTimeout, wait_until

REPO = Path(__file__).resolve().parents[2]
POM_DIR = Path(__file__).resolve().parent / "s3proxy"
BUILD_DIR = REPO / "target" / "s3proxy"  # outside the source tree, ignored by git
STARTUP_TIMEOUT_S = 60.0
INSTALL_TIMEOUT_S = 900.0
ACCESS_KEY = "pybkx-test"
SECRET_KEY = "pybkx-test-secret"
MAIN_CLASS = "org.gaul.s3proxy.Main"


class S3ServerError(Exception):
    """S3Proxy could not be installed, started or stopped."""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise S3ServerError(f"`{name}` is needed (JDK 17 and Maven) for S3Proxy but is not on PATH")
    return path


def install(build_dir: Path = BUILD_DIR) -> str:
    """S3Proxy's classpath, resolved by Maven once per change of its pom (a stamp holds the pom's
    hash; an unchanged pom skips Maven). Raises S3ServerError when Maven fails."""
    _tool("java")
    build_dir.mkdir(parents=True, exist_ok=True)
    classpath_file, stamp = build_dir / "classpath.txt", build_dir / "pom.sha256"
    wanted = hashlib.sha256((POM_DIR / "pom.xml").read_bytes()).hexdigest()
    with (build_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time (parallel sessions)
        if classpath_file.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
            return classpath_file.read_text().strip()
        stamp.unlink(missing_ok=True)
        argv = [
            _tool("mvn"), "-q", "-B", "-Dstyle.color=never",
            f"-Dmdep.outputFile={classpath_file}", "dependency:build-classpath",
        ]  # fmt: skip
        try:
            done = subprocess.run(
                argv, cwd=POM_DIR, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
            )
        except subprocess.TimeoutExpired as exc:
            raise S3ServerError(
                f"Maven did not resolve S3Proxy in {INSTALL_TIMEOUT_S:.0f} s"
            ) from exc
        if done.returncode != 0 or not classpath_file.exists():
            output = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
            raise S3ServerError(
                f"Maven could not resolve S3Proxy (exit {done.returncode}):\n{output}"
            )
        stamp.write_text(wanted + "\n")
        return classpath_file.read_text().strip()


@dataclass
class S3Server:
    """A running S3Proxy: ``endpoint`` is ``host:port`` (plain http), objects live as files
    under ``directory/<bucket>/<key>``."""

    classpath: str
    directory: Path
    port: int = field(default_factory=free_port)
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory.parent / f"{self.directory.name}.log"

    def start(self) -> None:
        """Start (again, on the same port and directory) and wait until it answers HTTP."""
        self.directory.mkdir(parents=True, exist_ok=True)
        properties = self.directory.parent / f"{self.directory.name}.properties"
        properties.write_text(
            f"s3proxy.endpoint=http://{self.endpoint}\n"
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={self.access_key}\n"
            f"s3proxy.credential={self.secret_key}\n"
            "jclouds.provider=filesystem\n"
            f"jclouds.filesystem.basedir={self.directory}\n"
        )
        argv = [
            _tool("java"), "-Xmx256m", "-XX:+UseSerialGC", "-DLOG_LEVEL=warn",
            "-cp", self.classpath, MAIN_CLASS, "--properties", str(properties),
        ]  # fmt: skip
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            wait_until(self._answers, "S3Proxy answers HTTP", timeout_s=STARTUP_TIMEOUT_S)
        except WaitTimeout:
            self.stop()
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
            raise S3ServerError(f"S3Proxy did not start (log {self.log}):\n{tail}") from None

    def _answers(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
            raise S3ServerError(f"S3Proxy exited (log {self.log}):\n{tail}")
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            connection.request("GET", "/")
            connection.getresponse().read()
            return True  # any HTTP answer (403 without credentials) means it serves
        except OSError:
            return False
        finally:
            connection.close()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def running_s3_server(directory: Path) -> Iterator[S3Server]:
    """An installed, started S3Proxy over ``directory``; stopped on exit."""
    try:
        classpath = install()
    except S3ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    server = S3Server(classpath, directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One S3Proxy per test module, on loopback, over a temporary directory."""
    with running_s3_server(tmp_path_factory.mktemp("s3") / "objects") as server:
        yield server


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m support.s3server install")
    print(f"S3Proxy classpath: {len(install().split(':'))} jars")
