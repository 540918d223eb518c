"""A separate process offloading one ledger, for the tests that kill an offloader mid-upload:
``offload_child.py URI LEDGER_ID ENDPOINT ACCESS SECRET BUCKET OWNER``. Prints the action."""

from __future__ import annotations

import sys

from pybkx.client import BookKeeper
from pybkx.config.objectstore import ObjectStorageSettings
from pybkx.offload import ObjectStore, offload_ledger


def main() -> None:
    uri, ledger_id, endpoint, access, secret, bucket, owner = sys.argv[1:]
    settings = ObjectStorageSettings(
        bucket=bucket, endpoint=endpoint, access_key=access, secret_key=secret, prefix="cold"
    )
    with BookKeeper(uri) as bk:
        result = offload_ledger(bk, ObjectStore(settings), int(ledger_id), b"pw", owner=owner)
    print(result.action, flush=True)


if __name__ == "__main__":
    main()
