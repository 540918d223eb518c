"""How a bookie's configuration is read: BookKeeper key names and defaults, files, flags, errors.

Owns ServerConfig parsing and its hand-off to LedgerStorage/BookieServer; must never start a bookie.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pybkx._core import BookieServer, LedgerStorage
from pybkx.config import ConfigError, ServerConfig, parse_properties
from pybkx.config.bookkeeper_keys import NOT_IMPLEMENTED

MIB = 1 << 20


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- defaults --------------------------------------------------------------------------------


def test_defaults_are_bookkeepers() -> None:
    config = ServerConfig()
    assert config.bookie_port == 3181
    assert config.journal_directories == ("/tmp/bk-txn",)
    assert config.ledger_directories == ("/tmp/bk-data",)
    assert config.index_directories is None
    assert config.metadata_service_uri is None
    assert config.journal_max_group_wait_ms == 2
    assert config.journal_buffered_writes_threshold_bytes == 512 * 1024
    assert config.journal_sync_data is True
    # BookKeeper's default too; pybkx reads it as adaptive group commit (docs/storage.md).
    assert config.journal_adaptive_group_writes is True
    assert config.journal_max_size_mb == 2048
    assert config.log_size_limit_bytes == 1 << 30
    assert config.flush_interval_ms == 10_000
    assert config.netty_max_frame_size_bytes == 5 * MIB
    assert config.max_pending_add_requests_per_thread == 10_000
    assert config.max_pending_read_requests_per_thread == 10_000
    assert config.max_batch_read_size_bytes == 5 * MIB
    assert config.read_only_mode_enabled is True
    assert config.force_read_only_bookie is False
    assert config.allow_loopback is False
    assert config.http_server_enabled is False


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


# --- properties syntax -----------------------------------------------------------------------


def test_properties_comments_blank_lines_and_separators(tmp_path: Path) -> None:
    conf = write(
        tmp_path / "bk_server.conf",
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   \n"
        "bookiePort=3999\n"
        "  journalDirectories = /d/j  \n"
        "ledgerDirectories: /d/l\n"
        "allowLoopback true\n"
        "#bookiePort=1\n",
    )
    config = ServerConfig.from_file(conf)
    assert config.bookie_port == 3999
    assert config.journal_directories == ("/d/j",)
    assert config.ledger_directories == ("/d/l",)
    assert config.allow_loopback is True
    assert config.source == str(conf)


def test_backslash_continues_a_line_and_leading_whitespace_is_dropped(tmp_path: Path) -> None:
    conf = write(
        tmp_path / "bk_server.conf",
        "ledgerDirectories=/d/l1,\\\n    /d/l2,\\\n\t/d/l3\nbookiePort=3182\n",
    )
    config = ServerConfig.from_file(conf)
    assert config.ledger_directories == ("/d/l1", "/d/l2", "/d/l3")
    assert config.bookie_port == 3182


def test_an_escaped_backslash_does_not_continue_the_line() -> None:
    entries = parse_properties("a=x\\\\\nb=y\n")
    assert entries == [("a", "x\\", 1), ("b", "y", 2)]


def test_a_comment_line_inside_a_continuation_is_part_of_the_value() -> None:
    assert parse_properties("a=1,\\\n#2\n") == [("a", "1,#2", 1)]


def test_escapes_and_empty_values() -> None:
    entries = parse_properties("key\\ with\\ space = v\\u0041\\t!\nempty=\nbare\n")
    assert entries == [("key with space", "vA\t!", 1), ("empty", "", 2), ("bare", "", 3)]


def test_repeated_directory_keys_add_up_and_repeated_scalars_must_agree(tmp_path: Path) -> None:
    conf = write(
        tmp_path / "a.conf", "ledgerDirectories=/l1\nledgerDirectories=/l2\nbookiePort=1\n"
    )
    assert ServerConfig.from_file(conf).ledger_directories == ("/l1", "/l2")
    conf = write(tmp_path / "b.conf", "bookiePort=3181\nbookiePort=3181\n")
    assert ServerConfig.from_file(conf).bookie_port == 3181
    conf = write(tmp_path / "c.conf", "bookiePort=3181\n\nbookiePort=4000\n")
    with pytest.raises(ConfigError, match=r"bookiePort.*c\.conf:3.*first at line 1"):
        ServerConfig.from_file(conf)


def test_legacy_journal_directory_is_used_when_journal_directories_is_absent(
    tmp_path: Path,
) -> None:
    conf = write(tmp_path / "legacy.conf", "journalDirectory=/d/old\n")
    assert ServerConfig.from_file(conf).journal_directories == ("/d/old",)
    conf = write(tmp_path / "both.conf", "journalDirectory=/d/old\njournalDirectories=/d/a,/d/b\n")
    assert ServerConfig.from_file(conf).journal_directories == ("/d/a", "/d/b")
    conf = write(tmp_path / "blank.conf", "journalDirectories=\njournalDirectory=/d/old\n")
    assert ServerConfig.from_file(conf).journal_directories == ("/d/old",)


def test_a_bk_server_conf_with_many_keys_parses(tmp_path: Path) -> None:
    conf = write(
        tmp_path / "bk_server.conf",
        "## Bookie settings\n"
        "bookiePort=3181\n"
        "extraServerComponents=\n"
        "httpServerEnabled=false\n"
        "httpServerPort=8080\n"
        "journalDirectories=/tmp/bk-txn\n"
        "ledgerDirectories=/tmp/bk-data\n"
        "metadataServiceUri=zk+hierarchical://localhost:2181/ledgers\n"
        "zkServers=localhost:2181\n"
        "zkTimeout=10000\n"
        "statsProviderClass=org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider\n"
        "storage.range.store.dirs=data/bookkeeper/ranges\n",
    )
    config = ServerConfig.from_file(conf)
    assert config.metadata_service_uri == "zk+hierarchical://localhost:2181/ledgers"
    assert config.zk_servers == "localhost:2181"
    assert config.zk_timeout_ms == 10_000
    assert config.extra["storage.range.store.dirs"] == "data/bookkeeper/ranges"


# --- unknown keys ----------------------------------------------------------------------------


def test_bookkeeper_keys_pybkx_does_not_implement_are_kept_and_noted_one_per_line(
    tmp_path: Path,
) -> None:
    conf = write(
        tmp_path / "x.conf",
        "gcMetadataOpRateLimit=600000\nnumAddWorkerThreads=8\nbookiePort=3181\nzkLedgersRootPath=/x\n",
    )
    config = ServerConfig.from_file(conf)
    assert dict(config.extra) == {
        "gcMetadataOpRateLimit": "600000",
        "numAddWorkerThreads": "8",
    }
    notes = config.notes()
    assert len(notes) == 2
    assert notes[0].startswith(f"gcMetadataOpRateLimit=600000 ({conf}:1) is not implemented: ")
    assert "garbage collection" in notes[0]
    assert notes[1].startswith(f"numAddWorkerThreads=8 ({conf}:2) is not implemented: ")
    assert "tokio" in notes[1]
    # zkLedgersRootPath is used (it builds the metadata URI with zkServers): no note.
    assert not any("zkLedgersRootPath" in n for n in notes)


def test_a_misspelt_key_is_refused_naming_the_closest_key_and_the_line(tmp_path: Path) -> None:
    conf = write(tmp_path / "x.conf", "bookiePort=3181\njournalMaxGroupWaitMsec=5\n")
    with pytest.raises(ConfigError) as refused:
        ServerConfig.from_file(conf)
    message = str(refused.value)
    assert f"unknown key journalMaxGroupWaitMsec in {conf}:2" in message
    assert "did you mean journalMaxGroupWaitMSec?" in message
    assert "--lenient" in message


def test_a_misspelt_bookkeeper_key_pybkx_does_not_implement_is_named_too(tmp_path: Path) -> None:
    conf = write(tmp_path / "x.conf", "gcMetadataOpRateLimi=1000\n")
    with pytest.raises(ConfigError, match="did you mean gcMetadataOpRateLimit"):
        ServerConfig.from_file(conf)


def test_a_key_of_no_known_system_is_refused(tmp_path: Path) -> None:
    conf = write(tmp_path / "x.conf", "fooBarBaz=1\n")
    with pytest.raises(ConfigError, match=r"fooBarBaz .*not a BookKeeper or pybkx key"):
        ServerConfig.from_file(conf)


def test_lenient_warns_once_per_misspelt_key_and_ignores_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = write(tmp_path / "x.conf", "journalMaxGroupWaitMsec=5\nfooBar=1\n")
    with caplog.at_level(logging.WARNING, logger="pybkx.config"):
        config = ServerConfig.from_file(conf, lenient=True)
    assert config.journal_max_group_wait_ms == 2  # not applied: the key is not BookKeeper's
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "did you mean journalMaxGroupWaitMSec" in warnings[0]


def test_origins_name_the_line_the_command_line_or_the_default(tmp_path: Path) -> None:
    conf = write(tmp_path / "x.conf", "# c\nbookiePort=3999\njournalSyncData=false\n")
    config = ServerConfig.load(conf, {"journalSyncData": "true"})
    assert config.origin("bookiePort") == f"{conf}:2"
    assert config.origin("journalSyncData") == "command line"
    assert config.origin("journalQueueSize") == "default"
    rows = {key: (value, origin) for key, value, origin, _ in config.describe()}
    assert rows["bookiePort"] == (3999, f"{conf}:2")
    assert rows["journalSyncData"] == (True, "command line")


def test_print_config_shows_each_value_with_its_source(tmp_path: Path) -> None:
    conf = write(tmp_path / "x.conf", "bookiePort=3999\ngcMetadataOpRateLimit=5\ntypoKey=1\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pybkx",
            "bookie",
            "--conf",
            str(conf),
            "--port",
            "4000",
            "--print-config",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    rows = {row["key"]: row for row in json.loads(run.stdout)}
    assert rows["bookiePort"]["value"] == 4000
    assert rows["bookiePort"]["source"] == "command line"
    assert rows["journalQueueSize"]["source"] == "default"
    assert rows["gcMetadataOpRateLimit"]["source"] == f"{conf}:2"
    assert rows["gcMetadataOpRateLimit"]["note"].startswith("not implemented: ")
    assert "unknown key" in rows["typoKey"]["note"]
    table = subprocess.run(
        [sys.executable, "-m", "pybkx", "bookie", "--conf", str(conf), "--print-config"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert table.returncode == 0, table.stderr
    assert "bookiePort" in table.stdout and f"{conf.name}:1" in table.stdout


def test_every_bookkeeper_key_is_implemented_or_says_what_pybkx_does_instead() -> None:
    implemented = set(ServerConfig.known_keys())
    assert not implemented & set(NOT_IMPLEMENTED)
    assert all(note.strip() for note in NOT_IMPLEMENTED.values())


def test_keyword_arguments_refuse_unknown_keys_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match="did you mean 'journalMaxSizeMB'"):
        ServerConfig.of(journalMaxSizeMb=1)
    assert ServerConfig.of(journalMaxSizeMB=1).journal_max_size_mb == 1


def test_unknown_keys_survive_overrides(tmp_path: Path) -> None:
    conf = write(tmp_path / "x.conf", "gcMetadataOpRateLimit=600000\n")
    config = ServerConfig.from_file(conf).with_overrides({"bookiePort": 4000})
    assert config.extra["gcMetadataOpRateLimit"] == "600000"
    assert config.bookie_port == 4000


# --- TOML ------------------------------------------------------------------------------------


def test_toml_uses_the_same_flat_key_names(tmp_path: Path) -> None:
    conf = write(
        tmp_path / "bookie.toml",
        "bookiePort = 3999\n"
        'journalDirectories = ["/d/j1", "/d/j2"]\n'
        'ledgerDirectories = "/d/l1,/d/l2"\n'
        "journalSyncData = false\n"
        "journalMaxGroupWaitMSec = 0\n"
        "forceReadOnlyBookie = true\n"
        'zkServers = ["zk1:2181", "zk2:2181"]\n'
        "dlog.bkcEnsembleSize = 3\n",
    )
    config = ServerConfig.from_file(conf)
    assert config.bookie_port == 3999
    assert config.journal_directories == ("/d/j1", "/d/j2")
    assert config.ledger_directories == ("/d/l1", "/d/l2")
    assert config.journal_sync_data is False
    assert config.journal_max_group_wait_ms == 0
    assert config.force_read_only_bookie is True
    assert config.zk_servers == "zk1:2181,zk2:2181"
    assert config.metadata_uri() == "zk+hierarchical://zk1:2181;zk2:2181/ledgers"
    assert config.extra["dlog.bkcEnsembleSize"] == 3


def test_toml_types_are_checked(tmp_path: Path) -> None:
    conf = write(tmp_path / "bad.toml", "bookiePort = true\n")
    with pytest.raises(ConfigError, match=r"invalid bookiePort in .*bad\.toml: expected an int"):
        ServerConfig.from_file(conf)
    conf = write(tmp_path / "bad2.toml", "journalSyncData = 1.5\n")
    with pytest.raises(ConfigError, match="journalSyncData"):
        ServerConfig.from_file(conf)


def test_toml_syntax_errors_name_the_file(tmp_path: Path) -> None:
    conf = write(tmp_path / "broken.toml", "bookiePort = = 1\n")
    with pytest.raises(ConfigError, match=r"broken\.toml"):
        ServerConfig.from_file(conf)


# --- overrides -------------------------------------------------------------------------------


def test_overrides_win_over_the_file_and_leave_it_unchanged(tmp_path: Path) -> None:
    conf = write(tmp_path / "x.conf", "bookiePort=3999\nledgerDirectories=/d/l\n")
    base = ServerConfig.from_file(conf)
    config = base.with_overrides(
        {"bookiePort": "4001", "journalDirectories": "/f/a,/f/b", "forceReadOnlyBookie": True},
        source="command line",
    )
    assert config.bookie_port == 4001
    assert config.journal_directories == ("/f/a", "/f/b")
    assert config.ledger_directories == ("/d/l",)
    assert config.force_read_only_bookie is True
    assert base.bookie_port == 3999
    assert config.source == f"{conf} + command line"


def test_load_without_a_file_is_defaults_plus_overrides() -> None:
    config = ServerConfig.load(None, {"bookiePort": 3300})
    assert config.bookie_port == 3300
    assert config.ledger_directories == ("/tmp/bk-data",)
    assert ServerConfig.load() == ServerConfig()


def test_keyword_construction_is_validated_and_normalised() -> None:
    config = ServerConfig(ledger_directories=["/a", "/b"])  # type: ignore[arg-type]
    assert config.ledger_directories == ("/a", "/b")
    with pytest.raises(ConfigError, match="bookiePort"):
        ServerConfig(bookie_port=70_000)


# --- bad values ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "key", "reason"),
    [
        ("bookiePort=abc", "bookiePort", "expected an integer, got 'abc'"),
        ("bookiePort=65536", "bookiePort", "between 0 and 65535"),
        ("bookiePort=-1", "bookiePort", "between 0 and 65535"),
        ("bookiePort=0", "bookiePort", "allowEphemeralPorts"),
        ("ledgerDirectories=", "ledgerDirectories", "no directory given"),
        ("ledgerDirectories= , ,", "ledgerDirectories", "no directory given"),
        ("journalDirectories=", "journalDirectories", "no directory given"),
        ("indexDirectories=", "indexDirectories", "no directory given"),
        ("journalSyncData=maybe", "journalSyncData", "expected true or false"),
        ("journalMaxSizeMB=0", "journalMaxSizeMB", "between 1 and"),
        ("journalQueueSize=1.5", "journalQueueSize", "expected an integer"),
        ("logSizeLimit=100", "logSizeLimit", "between 4096 and"),
        ("nettyMaxFrameSizeBytes=0", "nettyMaxFrameSizeBytes", "between 64 and"),
        ("maxPendingAddRequestsPerThread=0", "maxPendingAddRequestsPerThread", "between 1 and"),
        ("maxBatchReadSize=big", "maxBatchReadSize", "expected an integer"),
        ("flushInterval=99999999999", "flushInterval", "between 0 and 2147483647"),
    ],
)
def test_bad_values_raise_one_line_naming_the_key_and_file(
    tmp_path: Path, line: str, key: str, reason: str
) -> None:
    conf = write(tmp_path / "bad.conf", f"# header\n{line}\n")
    with pytest.raises(ConfigError) as info:
        ServerConfig.from_file(conf)
    message = str(info.value)
    assert "\n" not in message
    assert key in message
    assert str(conf) in message
    assert reason in message


def test_bad_values_name_their_line(tmp_path: Path) -> None:
    conf = write(tmp_path / "bad.conf", "# header\n\nbookiePort=x\n")
    with pytest.raises(ConfigError, match=r"invalid bookiePort in .*bad\.conf:3: "):
        ServerConfig.from_file(conf)


def test_bad_override_names_its_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="invalid bookiePort in command line: "):
        ServerConfig.load(None, {"bookiePort": "x"})


def test_ints_accept_signs_and_hex_like_bookkeeper() -> None:
    config = ServerConfig().with_overrides(
        {"journalBufferedWritesThreshold": "0x100", "journalMaxBackups": "+3"}
    )
    assert config.journal_buffered_writes_threshold_bytes == 256
    assert config.journal_max_backups == 3


@pytest.mark.parametrize(("text", "expected"), [("TRUE", True), ("yes", True), ("Off", False)])
def test_booleans_accept_bookkeepers_spellings(text: str, expected: bool) -> None:
    config = ServerConfig().with_overrides({"journalSyncData": text})
    assert config.journal_sync_data is expected


def test_forced_read_only_needs_read_only_mode() -> None:
    with pytest.raises(ConfigError, match="forceReadOnlyBookie"):
        ServerConfig().with_overrides(
            {"forceReadOnlyBookie": "true", "readOnlyModeEnabled": "false"}
        )


def test_ephemeral_port_is_allowed_when_asked_for() -> None:
    config = ServerConfig().with_overrides({"bookiePort": 0, "allowEphemeralPorts": "true"})
    assert config.bookie_port == 0


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read configuration file .*nope\.conf"):
        ServerConfig.from_file(tmp_path / "nope.conf")


# --- hand-off to the extension ---------------------------------------------------------------


def test_the_storage_reads_the_typed_configuration_itself(tmp_path: Path) -> None:
    conf = write(
        tmp_path / "bk_server.conf",
        f"journalDirectories={tmp_path / 'j1'},{tmp_path / 'j2'}\n"
        f"ledgerDirectories={tmp_path / 'l'}\n"
        f"indexDirectories={tmp_path / 'i'}\n"
        "journalPreAllocSizeMB=1\n"
        "journalMaxGroupWaitMSec=1\n"
        "logSizeLimit=1048576\n"
        "flushInterval=0\n",
    )
    config = ServerConfig.from_file(conf)
    with LedgerStorage(config) as storage:
        storage.add_entry(1, 0, b"x", master_key=b"k")
        assert storage.read_entry(1, 0) == b"x"
    for directory in ("j1", "j2", "l", "i"):
        assert (tmp_path / directory / "current").is_dir()
    assert list((tmp_path / "i" / "current").glob("index.log"))


def test_storage_settings_carry_every_storage_key_and_no_server_key() -> None:
    settings = ServerConfig().storage_settings()
    assert settings["indexDirectories"] is None  # unset: the index lives in a ledger directory
    assert set(settings) == {
        "journalDirectories",
        "ledgerDirectories",
        "indexDirectories",
        "journalMaxGroupWaitMSec",
        "journalBufferedWritesThreshold",
        "journalBufferedEntriesThreshold",
        "journalFlushWhenQueueEmpty",
        "journalAdaptiveGroupWrites",
        "journalSyncData",
        "journalWriteBufferSizeKB",
        "journalPreAllocSizeMB",
        "journalMaxSizeMB",
        "journalMaxBackups",
        "journalQueueSize",
        "journalPageCacheFlushIntervalMSec",
        "skipReplayJournalInvalidRecord",
        "journalRemoveFromPageCache",
        "journalDirectIO",
        "journalReuseFiles",
        "isForceGCAllowWhenNoSpace",
        "diskReservedSpaceMB",
        "logSizeLimit",
        "writeBufferSizeBytes",
        "dbStorage_directIOEntryLogger",
        "entryLogDirectReads",
        "flushInterval",
        "dbStorage_writeCacheMaxSizeMb",
        "dbStorage_rocksDB_blockCacheSize",
        "dbStorage_readAheadCacheMaxSizeMb",
        "dbStorage_readAheadCacheBatchSize",
        "entryLogReadAheadThreads",
        "gcWaitTime",
        "minorCompactionThreshold",
        "minorCompactionInterval",
        "majorCompactionThreshold",
        "majorCompactionInterval",
        "compactionRateByBytes",
        "tieredStorageLevels",
        *(
            f"tieredStorageLevel{level}{what}"
            for level in range(4)
            for what in ("Alias", "Dirs", "DirsQuota")
        ),
        "entryLogAllocatorClass",
        "entryLogReviewerClass",
        "reviewerSoftLimitBytes",
        "reviewerHardLimitBytes",
        "entryLogAnnotatorClass",
        "lrfuStepFactor",
        "lrfuAttenuationFactor",
        *(
            f"tieredStorageLevel{level}{what}"
            for level in range(4)
            for what in ("HighWatermark", "LowWatermark")
        ),
        "tieredStoragePromoteOnRead",
        "tieredStorageMoveRateByBytes",
        "scrubRateBytesPerSecond",
        "scrubIntervalSeconds",
    }


def test_the_server_takes_its_limits_from_the_configuration(tmp_path: Path) -> None:
    config = ServerConfig.of(
        journalDirectories=str(tmp_path / "j"),
        ledgerDirectories=str(tmp_path / "l"),
        journalPreAllocSizeMB=1,
        forceReadOnlyBookie=True,
        nettyMaxFrameSizeBytes=1 << 20,
    )
    with LedgerStorage(config) as storage:
        server = BookieServer(storage, config, "127.0.0.1", 0)
        try:
            assert server.is_read_only()
            assert server.port > 0
        finally:
            server.stop(1000)


def test_response_buffer_water_marks_must_be_ordered() -> None:
    with pytest.raises(ConfigError, match="serverWriteBufferLowWaterMark"):
        ServerConfig.of(serverWriteBufferLowWaterMark=2048, serverWriteBufferHighWaterMark=1024)
    with pytest.raises(ConfigError, match="serverResponseBufferTotalBytes"):
        ServerConfig.of(serverResponseBufferTotalBytes=1024)


def test_listening_address_is_all_interfaces_by_default() -> None:
    assert ServerConfig().listening_address() == "0.0.0.0"


@pytest.mark.skipif(
    "lo" not in {name for _, name in socket.if_nameindex()}, reason="no 'lo' interface"
)
def test_listening_interface_names_resolve_to_their_address() -> None:
    config = ServerConfig().with_overrides({"listeningInterface": "lo"})
    assert config.listening_address() == "127.0.0.1"


def test_metadata_uri_is_none_for_a_standalone_bookie() -> None:
    assert ServerConfig().metadata_uri() is None
    uri = "zk+hierarchical://zk:2181/ledgers"
    assert ServerConfig().with_overrides({"metadataServiceUri": uri}).metadata_uri() == uri


def test_settings_round_trip_through_overrides() -> None:
    config = ServerConfig().with_overrides({"bookiePort": 3999, "ledgerDirectories": "/a,/b"})
    assert ServerConfig().with_overrides(config.settings()) == config
