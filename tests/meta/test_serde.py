"""serde.py's byte formats: round trips, what readers refuse, and (interop) byte equality with
what Apache BookKeeper's own code writes for the same values (java/.../MetadataFormats.java)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from java_metadata import run_metadata_formats

from pybkx import errors
from pybkx.meta import (
    BookieServiceInfo,
    Cookie,
    DigestType,
    Endpoint,
    LedgerMetadata,
    LedgerState,
    serde,
)

HEADER = b"BookieMetadataFormatVersion\t"

# --- the values MetadataFormats.java serialises -----------------------------------------------


def open_ledger() -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        ensembles={0: ("127.0.0.1:3181", "127.0.0.2:3181", "127.0.0.3:3181")},
        digest_type=DigestType.CRC32C,
        password=b"pw",
        c_token=12345,
    )


def closed_ledger(version: int) -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=2,
        write_quorum_size=2,
        ack_quorum_size=1,
        ensembles={
            0: ("127.0.0.1:3181", "127.0.0.2:3181"),
            10: ("127.0.0.1:3181", "127.0.0.3:3181"),
        },
        state=LedgerState.CLOSED,
        last_entry_id=19,
        length=2048,
        digest_type=DigestType.HMAC,
        password=b'\x00\x07\n"\xff\\',
        ctime=1_700_000_000_000,
        custom_metadata={"application": b"pybkx", "bin": b"\x00\x01\xfe"},
        metadata_format_version=version,
    )


def recovering_ledger(version: int) -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        ensembles={0: ("bookie-1.example:3181",)},
        state=LedgerState.IN_RECOVERY,
        digest_type=DigestType.DUMMY,
        password=b"",
        metadata_format_version=version,
    )


FULL_COOKIE = Cookie(
    bookie_id="127.0.0.1:3181",
    journal_dirs=("/j1", "/j2"),
    ledger_dirs=("/l1", "/l2"),
    instance_id="6a1c4f2e-0b7d-4c55-9a47-2f1e9d3c8b10",
    index_dirs=("/i1",),
)
MINIMAL_COOKIE = Cookie("bookie-1.example:3181", ("/data/journal",), ("/data/ledgers",))
SERVICE_INFO = BookieServiceInfo(
    endpoints=(
        Endpoint("bookie", 3181, "127.0.0.1", "bookie-rpc", (), ("tls",)),
        Endpoint("httpserver", 8080, "127.0.0.1", "http", ("basic",), ()),
    ),
    properties={"rack": "/r1"},
)


def python_cases() -> dict[str, bytes]:
    cases = {"ledger-open-v3": serde.serialize_ledger_metadata(open_ledger())}
    for version in (1, 2, 3):
        cases[f"ledger-closed-v{version}"] = serde.serialize_ledger_metadata(closed_ledger(version))
        cases[f"ledger-recovering-v{version}"] = serde.serialize_ledger_metadata(
            recovering_ledger(version)
        )
    cases["cookie-full"] = serde.serialize_cookie(FULL_COOKIE)
    cases["cookie-minimal"] = serde.serialize_cookie(MINIMAL_COOKIE)
    cases["service-info"] = serde.serialize_bookie_service_info(SERVICE_INFO)
    cases["layout"] = serde.serialize_layout()
    return cases


# --- ledger metadata ------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("make", [closed_ledger, recovering_ledger])
def test_protobuf_formats_round_trip(make: Callable[[int], LedgerMetadata], version: int) -> None:
    md = make(version)
    assert serde.parse_ledger_metadata(serde.serialize_ledger_metadata(md)) == md


def test_format_3_keeps_the_creator_token_and_format_2_drops_it() -> None:
    md = open_ledger()
    assert serde.parse_ledger_metadata(serde.serialize_ledger_metadata(md)).c_token == 12345
    v2 = serde.serialize_ledger_metadata(md.replace(metadata_format_version=2))
    assert b"cToken" not in v2
    assert serde.parse_ledger_metadata(v2) == md.replace(metadata_format_version=2, c_token=0)


def test_format_3_always_writes_last_entry_password_and_token() -> None:
    md = open_ledger().replace(password=b"", c_token=0)
    data = serde.serialize_ledger_metadata(md)
    assert data.startswith(HEADER + b"3\n")
    body = data[len(HEADER) + 2 :]
    assert body[0] == len(body) - 1  # one-byte varint length prefix, then the message
    assert b"\x20" + b"\xff" * 9 + b"\x01" in body  # lastEntryId = -1 (field 4)
    assert b"\x42\x00" in body  # password = "" (field 8)
    assert body.endswith(b"\x60\x00")  # cToken = 0 (field 12), the last field
    assert b"\x50" not in body  # no ctime (field 10) unless set


def test_format_1_round_trips_what_it_can_hold() -> None:
    for md in (closed_ledger(1), recovering_ledger(1)):
        read = serde.parse_ledger_metadata(serde.serialize_ledger_metadata(md))
        assert read.metadata_format_version == 1
        assert (read.state, read.last_entry_id, read.length) == (
            md.state,
            md.last_entry_id,
            md.length,
        )
        assert read.ensembles == md.ensembles
        assert read.ack_quorum_size == read.write_quorum_size == md.write_quorum_size
        assert read.password == b"" and read.ctime is None and read.custom_metadata == {}


def test_format_1_text_as_old_bookkeeper_wrote_it() -> None:
    data = HEADER + b"1\n2\r\n3\r\n0\r\n0\ta:1\tb:1\tc:1\t\r\n"  # the header line ends in \\n only
    md = serde.parse_ledger_metadata(data)
    assert md.state == LedgerState.OPEN and md.last_entry_id == -1
    assert md.ensembles == {0: ("a:1", "b:1", "c:1")}
    assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (3, 2, 2)


def test_format_2_text_written_by_hand_is_read() -> None:
    text = (
        b"quorumSize: 1 ensembleSize: 1 length: 0 state: OPEN\n"
        b'segment { ensembleMember: "h:1" firstEntryId: 0 }\n'
    )
    md = serde.parse_ledger_metadata(HEADER + b"2\n" + text)
    # No password: digest type is not stored, and no ack quorum means ack = write quorum.
    assert md.password == b"" and md.ack_quorum_size == 1
    assert md.metadata_format_version == 2


def test_open_ledgers_are_written_without_length_or_last_entry() -> None:
    md = open_ledger().replace(last_entry_id=7, length=99)
    read = serde.parse_ledger_metadata(serde.serialize_ledger_metadata(md))
    assert (read.last_entry_id, read.length) == (-1, 0)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"garbage",
        HEADER,
        HEADER + b"3",
        HEADER + b"12345678901\n",
        HEADER + b"x\n",
        HEADER + b"4\n",
        HEADER + b"0\n",
        HEADER + b"3\n",  # no message at all
        HEADER + b"3\n\x05\x08\x02",  # truncated message
        HEADER + b"3\n\x02\x08\x02",  # required fields missing
        HEADER + b"3\n\x03\xff\xff\xff",  # undecodable
        HEADER + b"2\nquorumSize: two\n",
        HEADER + b"2\nnoSuchField: 1\n",
        HEADER + b"2\nquorumSize: 1\n",  # required fields missing
        HEADER + b"1\n2\n",
        HEADER + b"1\n2\n3\nx\n",
        HEADER + b"1\n1\n1\n0\n0\n",  # a segment line without bookies
        HEADER + b"1\n1\n2\n0\n0\ta:1\n",  # ensemble of the wrong size
        HEADER + b"1\n1\n1\n0\n5\ta:1\n0\tb:1\n",  # segments out of order
        HEADER + b"1\n1_0\n1\n0\n0\ta:1\n",  # Java's parseInt refuses underscores
    ],
)
def test_corrupt_ledger_metadata_is_refused(data: bytes) -> None:
    with pytest.raises(errors.MetadataSerializationException):
        serde.parse_ledger_metadata(data)


def test_a_quorum_that_does_not_fit_is_refused_when_read() -> None:
    md = open_ledger()
    data = serde.serialize_ledger_metadata(md).replace(b"\x08\x02\x10\x03", b"\x08\x04\x10\x03")
    with pytest.raises(errors.MetadataSerializationException, match="quorum"):
        serde.parse_ledger_metadata(data)


def test_trailing_bytes_after_a_format_3_message_are_ignored_as_java_does() -> None:
    data = serde.serialize_ledger_metadata(open_ledger())
    assert serde.parse_ledger_metadata(data + b"junk") == open_ledger()


def test_writing_an_unknown_format_is_refused() -> None:
    with pytest.raises(errors.MetadataSerializationException):
        serde.serialize_ledger_metadata(open_ledger().replace(metadata_format_version=4))


keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
bookie_ids = st.from_regex(r"[a-z0-9.\-]{1,12}:[0-9]{1,5}", fullmatch=True)


@st.composite
def ledger_metadata(draw: st.DrawFn) -> LedgerMetadata:
    ensemble_size = draw(st.integers(1, 5))
    write_quorum = draw(st.integers(1, ensemble_size))
    ack_quorum = draw(st.integers(1, write_quorum))
    starts = sorted(draw(st.sets(st.integers(1, 2**40), max_size=3)))
    ensembles = {
        first: tuple(
            draw(st.lists(bookie_ids, min_size=ensemble_size, max_size=ensemble_size, unique=True))
        )
        for first in [0, *starts]
    }
    state = draw(st.sampled_from(LedgerState))
    closed = state == LedgerState.CLOSED
    return LedgerMetadata(
        ensemble_size=ensemble_size,
        write_quorum_size=write_quorum,
        ack_quorum_size=ack_quorum,
        ensembles=ensembles,
        digest_type=draw(st.sampled_from(DigestType)),
        password=draw(st.binary(max_size=20)),
        state=state,
        last_entry_id=draw(st.integers(-1, 2**62)) if closed else -1,
        length=draw(st.integers(0, 2**62)) if closed else 0,
        ctime=draw(st.none() | st.integers(0, 2**62)),
        custom_metadata=draw(st.dictionaries(keys, st.binary(max_size=8))),
        c_token=draw(st.integers(0, 2**63 - 1)),
        metadata_format_version=draw(st.sampled_from([2, 3])),
    )


@settings(max_examples=150, deadline=None)
@given(ledger_metadata())
def test_any_ledger_metadata_round_trips(md: LedgerMetadata) -> None:
    read = serde.parse_ledger_metadata(serde.serialize_ledger_metadata(md))
    assert read == (md if md.metadata_format_version == 3 else md.replace(c_token=0))


# --- cookies, registrations, LAYOUT ---------------------------------------------------------


@pytest.mark.parametrize("cookie", [FULL_COOKIE, MINIMAL_COOKIE])
def test_cookie_round_trips(cookie: Cookie) -> None:
    assert serde.parse_cookie(serde.serialize_cookie(cookie)) == cookie


def test_cookie_text_has_bookkeepers_field_encodings() -> None:
    text = serde.serialize_cookie(FULL_COOKIE).decode()
    assert text == (
        "5\n"
        'bookieHost: "127.0.0.1:3181"\n'
        'journalDir: "/j1,/j2"\n'
        'ledgerDirs: "2\\t/l1\\t/l2"\n'
        'instanceId: "6a1c4f2e-0b7d-4c55-9a47-2f1e9d3c8b10"\n'
        'indexDirs: "1\\t/i1"\n'
    )


def test_layout_3_cookies_and_empty_optional_fields_are_read() -> None:
    old = serde.parse_cookie(b"3\n10.0.0.5:3181\n/j\n1\t/l\n")
    assert old == Cookie("10.0.0.5:3181", ("/j",), ("/l",))
    blank = serde.parse_cookie(
        b'4\nbookieHost: "h:1"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\n'
        b'instanceId: ""\nindexDirs: ""\n'
    )
    assert blank.instance_id is None and blank.index_dirs is None


@pytest.mark.parametrize(
    "data", [b"", b"x\n", b"2\nh:1\n", b"5\nbookieHost: 1\n", b'5\nbookieHost: "h:1"\n']
)
def test_unreadable_cookies_are_invalid(data: bytes) -> None:
    with pytest.raises(errors.InvalidCookieException):
        serde.parse_cookie(data)


def test_dir_path_encoding() -> None:
    assert serde.encode_dir_paths(("/a", "/b")) == "2\t/a\t/b"
    assert serde.decode_dir_paths("2\t/a\t/b") == ("/a", "/b")
    assert serde.encode_dir_paths(()) == "0"
    assert serde.decode_dir_paths("0") == ()


def test_service_info_round_trips_and_legacy_registrations_are_understood() -> None:
    data = serde.serialize_bookie_service_info(SERVICE_INFO)
    assert serde.parse_bookie_service_info(data, "127.0.0.1:3181") == SERVICE_INFO
    legacy = serde.parse_bookie_service_info(b"", "10.0.0.5:3181")
    assert legacy.endpoints == (Endpoint("10.0.0.5:3181", 3181, "10.0.0.5", "bookie-rpc"),)
    with pytest.raises(errors.MetadataSerializationException):
        serde.parse_bookie_service_info(b"", "no-port")
    with pytest.raises(errors.MetadataSerializationException):
        serde.parse_bookie_service_info(b"\xff\xff", "h:1")


def test_layout_round_trips_and_refuses_what_bookkeeper_refuses() -> None:
    assert serde.parse_layout(serde.serialize_layout()) == serde.LedgerLayout()
    assert serde.parse_layout(b"1\nhierarchical:1").manager_factory_class == "hierarchical"
    for bad in (b"3\nx:1", b"2", b"2\nno-version", b"2\nx:y", b"two\nx:1"):
        with pytest.raises(errors.MetadataSerializationException):
            serde.parse_layout(bad)


# --- interop: the bytes of Apache BookKeeper itself -----------------------------------------


@pytest.fixture(scope="module")
def java_cases() -> dict[str, bytes]:
    """What BookKeeper writes for the cases of :func:`python_cases`, by name."""
    return {
        name: bytes.fromhex(hexed)
        for name, hexed in (line.split("\t") for line in run_metadata_formats() if line)
    }


@pytest.mark.interop
def test_bookkeeper_writes_the_same_bytes(java_cases: dict[str, bytes]) -> None:
    ours = python_cases()
    assert sorted(java_cases) == sorted(ours)
    differing = {
        name: (java_cases[name], ours[name]) for name in ours if java_cases[name] != ours[name]
    }
    assert not differing, "\n".join(
        f"{name}:\n  java  {j!r}\n  pybkx {p!r}" for name, (j, p) in differing.items()
    )


@pytest.mark.interop
def test_bookkeeper_reads_back_what_pybkx_writes() -> None:
    """BookKeeper parses our bytes and serialises what it understood: the same bytes again."""
    ledgers = [open_ledger(), closed_ledger(3), recovering_ledger(3), closed_ledger(2)]
    ledgers += [open_ledger().replace(ctime=None, custom_metadata={"k": b"\x00"}, c_token=0)]
    ledger_bytes = [serde.serialize_ledger_metadata(md) for md in ledgers]
    cookie_bytes = [serde.serialize_cookie(c) for c in (FULL_COOKIE, MINIMAL_COOKIE)]
    back = run_metadata_formats("parse-ledger", *(b.hex() for b in ledger_bytes))
    assert [bytes.fromhex(h) if not h.startswith("ERROR") else h for h in back] == ledger_bytes
    back = run_metadata_formats("parse-cookie", *(b.hex() for b in cookie_bytes))
    assert [bytes.fromhex(h) if not h.startswith("ERROR") else h for h in back] == cookie_bytes
