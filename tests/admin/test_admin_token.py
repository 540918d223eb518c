"""The admin API's write endpoints behind a bearer token (pybkx's ``httpServerAuthTokenPath``;
BookKeeper's admin API has no authentication): every PUT, POST and DELETE must carry the token,
GET stays open, and a token file that cannot be used stops the bookie rather than leave the API
open. Real bookie processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_helpers import http
from support.bookies import assert_one_line_failure, needs_server, write_conf
from support.bookies import start_bookie as start_bookie
from support.ports import free_port

from pybkx.tools.sandbox import Sandbox

pytestmark = [pytest.mark.integration, needs_server]

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    root = tmp_path_factory.mktemp("token")
    token_file = root / "token"
    token_file.write_text(TOKEN + "\n")
    with Sandbox(
        1, directory=root / "sandbox", conf={"httpServerAuthTokenPath": str(token_file)}
    ) as sb:
        yield sb


def test_writes_need_the_token_and_reads_do_not(guarded: Sandbox) -> None:
    url = guarded.admin_urls[0] + "/api/v1/bookie/gc"
    assert http("GET", url).json() == {"is_in_force_gc": "false"}
    missing = http("PUT", url, b"{}")
    assert missing.status == 401 and "Bearer" in missing.json()["error"]
    wrong = http("PUT", url, b"{}", headers={"Authorization": "Bearer nope"})
    assert wrong.status == 401
    basic = http("PUT", url, b"{}", headers={"Authorization": f"Basic {TOKEN}"})
    assert basic.status == 401
    ok = http("PUT", url, b"{}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status == 200, ok.text


@pytest.mark.parametrize("content", ["", None])
def test_a_token_file_that_cannot_be_used_stops_the_bookie(
    tmp_path: Path, start_bookie: Any, content: str | None
) -> None:
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_text(content)
    extra = (
        f"httpServerEnabled=true\nhttpServerPort={free_port()}\n"
        f"httpServerAuthTokenPath={token_file}\n"
    )
    bookie = start_bookie("--conf", str(write_conf(tmp_path, free_port(), extra)))
    assert_one_line_failure(bookie, "httpServerAuthTokenPath")
