"""The bookie's TLS material kept fresh: every ``tlsCertFilesRefreshDurationSeconds`` it looks
at the store files' modification times and, when one changed, reads the stores again and hands
the new material to the server for the handshakes that follow (BookKeeper's TLSContextFactory
does the same on its next handshake). A store that no longer reads keeps the old material and
logs why. It never touches a connection.
"""

from __future__ import annotations

import logging
import threading

from pybkx._core import BookieServer
from pybkx.bookie.events import log_event
from pybkx.config import ConfigError, ServerConfig
from pybkx.config.tls import ServerTlsMaterial, file_stamps, server_tls_material

__all__ = ["TlsReloader"]

logger = logging.getLogger(__name__)


class TlsReloader:
    """Reloads ``server``'s TLS from ``config``'s stores when their files change; a thread only
    when ``tlsCertFilesRefreshDurationSeconds`` > 0."""

    def __init__(
        self, server: BookieServer, config: ServerConfig, material: ServerTlsMaterial
    ) -> None:
        self._server = server
        self._config = config
        self._stamps = material.stamps()
        self._files = material.files
        self._interval_s = float(config.tls_cert_files_refresh_duration_seconds)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="pybkx-tls-reload", daemon=True)
            self._thread.start()

    def check(self) -> bool:
        """Reload now if a store file changed; True if the server took new material."""
        if file_stamps(self._files) == self._stamps:
            return False
        try:
            material = server_tls_material(self._config)
            if material is None:
                return False
            self._server.reload_tls(material)
        except (ConfigError, ValueError) as exc:
            log_event(logger, logging.ERROR, "TLS stores changed but cannot be used", error=exc)
            return False
        self._stamps, self._files = material.stamps(), material.files
        log_event(logger, logging.INFO, "TLS stores reloaded", files=",".join(self._files))
        return True

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.check()

    def stop(self) -> None:
        """Stop looking; idempotent, never raises."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
