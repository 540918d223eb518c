"""A second process for the embedded metadata store tests: opens the shared directory, acts once.

Run as ``python embedded_child.py MODE URI ARGS...``; the parent reads its stdout lines and may
SIGKILL it. It must never clean up on purpose when told to hold (dying is the point).

Modes:
  ids COUNT               print READY, wait for a stdin line, generate COUNT ledger ids, print
                          ``IDS id id ...`` and exit.
  register BOOKIE RO      register BOOKIE (read-only if RO is 1), print READY, hold forever.
  lock NAME IDENTIFIER    take the lock, print LOCKED, hold forever.
  elect NAME IDENTIFIER   run the election; once leading print LEADER and hold forever.
  cas LEDGER VERSION      print READY, wait for a stdin line, write the ledger's metadata (closed)
                          expecting VERSION, print WON or LOST and exit.
"""

from __future__ import annotations

import sys
import threading

from pybkx import errors
from pybkx.meta import BookieServiceInfo, open_metadata_store


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def hold() -> None:
    threading.Event().wait()


def main(mode: str, uri: str, *args: str) -> None:
    store = open_metadata_store(uri)
    if mode == "ids":
        emit("READY")
        sys.stdin.readline()
        ids = [store.generate_ledger_id() for _ in range(int(args[0]))]
        emit("IDS " + " ".join(map(str, ids)))
    elif mode == "register":
        bookie, read_only = args[0], args[1] == "1"
        store.register_bookie(bookie, read_only, BookieServiceInfo.for_address("127.0.0.1", 3181))
        emit("READY")
        hold()
    elif mode == "lock":
        with store.lock(args[0], args[1], timeout=30):
            emit("LOCKED")
            hold()
    elif mode == "elect":
        store.election(args[0], args[1]).run(lambda: (emit("LEADER"), hold()))
    elif mode == "cas":
        ledger_id, version = int(args[0]), int(args[1])
        current = store.read_ledger_metadata(ledger_id).value
        emit("READY")
        sys.stdin.readline()
        try:
            store.write_ledger_metadata(ledger_id, current.closed(7, 700), version)
        except errors.MetadataVersionException:
            emit("LOST")
        else:
            emit("WON")
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    store.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
