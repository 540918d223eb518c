"""How pybkx's own tools call a bookie's admin HTTP API: plain ``http://`` or ``https://``, the
server's certificate checked against the CA that ``PYBKX_ADMIN_CA_FILE`` names (the system's
CAs without it) and, for a server that asks for client certificates
(``httpServerTrustStorePath``), the certificate and key that ``PYBKX_ADMIN_CERT_FILE`` and
``PYBKX_ADMIN_KEY_FILE`` name. It opens one request; it never parses an answer.
"""

from __future__ import annotations

import os
import ssl
import urllib.request
from http.client import HTTPResponse
from typing import Final

__all__ = ["CA_FILE_ENV", "CERT_FILE_ENV", "KEY_FILE_ENV", "admin_ssl_context", "open_admin"]

CA_FILE_ENV: Final = "PYBKX_ADMIN_CA_FILE"
"""PEM certificates of the CAs an admin server's certificate must chain to."""
CERT_FILE_ENV: Final = "PYBKX_ADMIN_CERT_FILE"
"""PEM certificate chain presented to an admin server that asks for one (the key may follow)."""
KEY_FILE_ENV: Final = "PYBKX_ADMIN_KEY_FILE"
"""PEM private key of ``PYBKX_ADMIN_CERT_FILE`` when it is a file of its own."""


def admin_ssl_context(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """A client context verifying the server's certificate and host name. Each argument left
    out is read from its environment variable. Raises OSError (a file missing or unreadable)
    or ssl.SSLError (not PEM, a key that does not match)."""
    ca_file = ca_file or os.environ.get(CA_FILE_ENV) or None
    cert_file = cert_file or os.environ.get(CERT_FILE_ENV) or None
    key_file = key_file or os.environ.get(KEY_FILE_ENV) or None
    context = ssl.create_default_context(cafile=ca_file)
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    return context


def open_admin(
    request: str | urllib.request.Request,
    timeout_s: float,
    context: ssl.SSLContext | None = None,
) -> HTTPResponse:
    """Opens ``request`` (a URL or a Request); an ``https`` one with ``context`` or else
    ``admin_ssl_context()``. Raises urllib.error.URLError (HTTPError for a 4xx/5xx answer),
    OSError, ssl.SSLError."""
    url = request if isinstance(request, str) else request.full_url
    if url.startswith("https:") and context is None:
        context = admin_ssl_context()
    response: HTTPResponse = urllib.request.urlopen(request, timeout=timeout_s, context=context)
    return response
