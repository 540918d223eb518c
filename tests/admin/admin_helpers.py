"""HTTP helpers for the operations tests: one request, its status, type and body whatever the
status. No fixtures here."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()

    def json(self) -> Any:
        assert self.content_type.startswith("application/json"), self.content_type
        return json.loads(self.body)


def http(
    method: str,
    url: str,
    body: bytes | None = None,
    timeout_s: float = 30.0,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> Reply:
    """One HTTP request (``context`` for https); a 4xx/5xx answer is returned like any other."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            return Reply(response.status, response.headers.get("Content-Type", ""), response.read())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.headers.get("Content-Type", ""), exc.read())
