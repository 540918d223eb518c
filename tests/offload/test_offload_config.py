"""The ``objectStorage*`` bookie keys: parsed and checked once, off without a bucket."""

from __future__ import annotations

import pytest

from pybkx.config import ConfigError, ServerConfig
from pybkx.config.objectstore import ObjectStorageSettings
from pybkx.config.values import InvalidValue


def test_no_bucket_means_no_offload() -> None:
    assert ServerConfig.of().object_storage() is None


def test_the_keys_make_the_settings() -> None:
    config = ServerConfig.of(
        objectStorageBucket="cold",
        objectStorageEndpoint="http://127.0.0.1:9000/",
        objectStoragePrefix="/pybkx/cluster-a/",
        objectStorageAccessKey="id",
        objectStorageSecretKey="secret",
        objectStorageRowGroupBytes="65536",
    )
    assert config.object_storage() == ObjectStorageSettings(
        bucket="cold",
        endpoint="http://127.0.0.1:9000",
        prefix="pybkx/cluster-a",
        access_key="id",
        secret_key="secret",
        row_group_bytes=65536,
    )
    assert (
        config.object_storage().key("ledgers", "1.parquet") == "pybkx/cluster-a/ledgers/1.parquet"
    )  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("objectStorageEndpoint", "ftp://host:21"),
        ("objectStorageEndpoint", "http://host:9000/some/path"),
        ("objectStoragePrefix", "a//b"),
        ("objectStoragePrefix", "a/../b"),
        ("objectStorageRowGroupBytes", "12"),
        ("objectStorageRequestTimeoutMs", "0"),
    ],
)
def test_bad_values_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key):
        ServerConfig.of(**{key: value})


def test_one_credential_without_the_other_is_refused() -> None:
    config = ServerConfig.of(objectStorageBucket="cold", objectStorageAccessKey="id")
    with pytest.raises(InvalidValue, match="objectStorageSecretKey"):
        config.object_storage()
