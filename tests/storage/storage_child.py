"""Crash-test child: opens a LedgerStorage, writes, and reports acknowledgements on stdout.

Run as ``python storage_child.py SPEC_JSON``; the parent kills it with SIGKILL. It must never close
the storage cleanly (a crash is the point) and never print an ACK before the add has returned.

Modes (``spec["mode"]``):
  crash-writer  one thread per ledger in ``ledgers``, each resuming at ``last_entry_id + 1`` and
                writing forever with a mix of ``add_entry`` and small ``add_entries`` batches.
  write         resume ``ledger`` at ``last_entry_id + 1``, add ``count`` entries one by one,
                print ``DONE``, then wait to be killed.
  delete        write ``entries`` entries to ``victim`` (optionally ``checkpoint()``), delete it,
                print ``DELETED``, then write ``keeper`` forever.
  meta          write entry 0 of ``ledger``, set its explicit LAC, fence it, print ``META``, wait.
  churn         ledgers written and deleted, entry logs collected and compacted, over and over.
  tiered        ledgers written, earlier ones read back, entry logs moved between tiers (the
                background mover and ``move_entry_logs``), over and over.

Output lines: ``READY``, ``RESUME <ledger> <entry>``, ``ACK <ledger> <entry>``, and the mode's
marker. Payloads come from ``storage_helpers.payload`` so the parent can regenerate them.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import traceback
from typing import Any

from storage_helpers import master_key, payload

from pybkx._core import LedgerStorage, inject_disk_fault
from pybkx.bookie import open_ledger_storage
from pybkx.errors import NoSuchEntryException, NoSuchLedgerExistsException

_out_lock = threading.Lock()


def emit(*lines: str) -> None:
    """Write whole lines with one write() and flush, so a kill never splits an earlier line."""
    with _out_lock:
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        sys.stdout.flush()


def die(exc: BaseException) -> None:
    """An engine error in the child is a test failure: report it and exit non-zero at once."""
    sys.stderr.write("".join(traceback.format_exception(exc)))
    sys.stderr.flush()
    os._exit(3)


def resume_point(storage: LedgerStorage, ledger_id: int) -> int:
    try:
        return storage.last_entry_id(ledger_id) + 1
    except (NoSuchLedgerExistsException, NoSuchEntryException):
        return 0


def write_forever(
    storage: LedgerStorage, ledger_id: int, start: int, seed: int, max_size: int
) -> None:
    rng = random.Random(seed)
    key = master_key(ledger_id)
    entry_id = start
    try:
        while True:
            if rng.random() < 0.5:
                storage.add_entry(
                    ledger_id, entry_id, payload(ledger_id, entry_id, max_size=max_size), key
                )
                ids = [entry_id]
            else:
                ids = list(range(entry_id, entry_id + rng.randint(2, 8)))
                batch = [(e, payload(ledger_id, e, max_size=max_size)) for e in ids]
                storage.add_entries(ledger_id, batch, key)
            emit(*(f"ACK {ledger_id} {e}" for e in ids))
            entry_id = ids[-1] + 1
    except BaseException as exc:
        die(exc)


def wait_to_be_killed() -> None:
    while True:
        time.sleep(3600)  # not a wait: the parent kills this process


def run_crash_writer(storage: LedgerStorage, spec: dict[str, Any]) -> None:
    ledgers: list[int] = spec["ledgers"]
    starts = {ledger: resume_point(storage, ledger) for ledger in ledgers}
    emit(*(f"RESUME {ledger} {start}" for ledger, start in starts.items()), "READY")
    threads = [
        threading.Thread(
            target=write_forever,
            args=(storage, ledger, starts[ledger], spec["seed"] * 1000 + i, spec["max_size"]),
            daemon=True,
        )
        for i, ledger in enumerate(ledgers)
    ]
    for t in threads:
        t.start()
    wait_to_be_killed()


def run_write(storage: LedgerStorage, spec: dict[str, Any]) -> None:
    ledger_id: int = spec["ledger"]
    start = resume_point(storage, ledger_id)
    emit(f"RESUME {ledger_id} {start}", "READY")
    key = master_key(ledger_id)
    for entry_id in range(start, start + spec["count"]):
        data = payload(
            ledger_id,
            entry_id,
            generation=spec["generation"],
            min_size=spec["min_size"],
            max_size=spec["max_size"],
        )
        storage.add_entry(ledger_id, entry_id, data, key)
        emit(f"ACK {ledger_id} {entry_id}")
    emit("DONE")
    wait_to_be_killed()


def run_delete(storage: LedgerStorage, spec: dict[str, Any]) -> None:
    victim: int = spec["victim"]
    keeper: int = spec["keeper"]
    emit("READY")
    storage.add_entries(
        victim, [(e, payload(victim, e)) for e in range(spec["entries"])], master_key(victim)
    )
    storage.add_entries(keeper, [(e, payload(keeper, e)) for e in range(8)], master_key(keeper))
    emit(*(f"ACK {keeper} {e}" for e in range(8)))
    if spec["checkpoint"]:
        storage.checkpoint()
    storage.delete_ledger(victim)
    emit("DELETED")
    write_forever(storage, keeper, 8, seed=spec["seed"], max_size=4096)


def run_churn(storage: LedgerStorage, spec: dict[str, Any]) -> None:
    """Ledgers written, some deleted, entry logs collected and compacted, over and over:
    ``ACK l e`` once an add returned, ``DELETING l`` before a deletion, ``DELETED l`` once it
    returned."""
    rng = random.Random(spec["seed"])
    first: int = spec["first_ledger"]
    emit("READY")
    written: list[int] = []
    try:
        for ledger_id in range(first, first + 10_000):
            entries = [(e, payload(ledger_id, e, max_size=8192)) for e in range(rng.randint(5, 40))]
            storage.add_entries(ledger_id, entries, master_key(ledger_id))
            emit(*(f"ACK {ledger_id} {e}" for e, _ in entries))
            written.append(ledger_id)
            if len(written) > 2 and rng.random() < 0.6:
                victim = written.pop(rng.randrange(len(written) - 2))
                emit(f"DELETING {victim}")
                storage.delete_ledger(victim)
                emit(f"DELETED {victim}")
            step = rng.random()
            if step < 0.3:
                storage.gc_entry_logs()
            elif step < 0.6:
                storage.compact(0.9)
            elif step < 0.7:
                storage.checkpoint()
    except BaseException as exc:
        die(exc)
    wait_to_be_killed()


def run_tiered(storage: LedgerStorage, spec: dict[str, Any]) -> None:
    """Ledgers written one after another (``ACK l e`` once an add returned) while entry logs
    move between tiers; earlier ledgers are read back meanwhile (reads during moves must not
    fail, and they make logs hot again)."""
    rng = random.Random(spec["seed"])
    first: int = spec["first_ledger"]
    emit("READY")
    try:
        for ledger_id in range(first, first + 10_000):
            entries = [(e, payload(ledger_id, e, max_size=8192)) for e in range(rng.randint(5, 30))]
            storage.add_entries(ledger_id, entries, master_key(ledger_id))
            emit(*(f"ACK {ledger_id} {e}" for e, _ in entries))
            for _ in range(3):
                earlier = rng.randint(first, ledger_id)
                entry = rng.randrange(storage.last_entry_id(earlier) + 1)
                if storage.read_entry(earlier, entry) != payload(earlier, entry, max_size=8192):
                    raise AssertionError(f"entry {entry} of ledger {earlier} read back wrong")
            if rng.random() < 0.5:
                storage.move_entry_logs()
            if rng.random() < 0.2:
                storage.checkpoint()
    except BaseException as exc:
        die(exc)
    wait_to_be_killed()


def run_meta(storage: LedgerStorage, spec: dict[str, Any]) -> None:
    ledger_id: int = spec["ledger"]
    key = master_key(ledger_id)
    emit("READY")
    storage.add_entry(ledger_id, 0, payload(ledger_id, 0), key)
    storage.set_explicit_lac(ledger_id, spec["lac"].encode(), key)
    storage.fence(ledger_id, key)
    emit("META")
    wait_to_be_killed()


MODES = {
    "crash-writer": run_crash_writer,
    "write": run_write,
    "delete": run_delete,
    "meta": run_meta,
    "churn": run_churn,
    "tiered": run_tiered,
}


def main() -> None:
    spec: dict[str, Any] = json.loads(sys.argv[1])
    try:
        for fault in spec.get("faults", []):
            inject_disk_fault(**fault)
        storage = open_ledger_storage(**spec["config"])
        MODES[spec["mode"]](storage, spec)
    except BaseException as exc:
        die(exc)


if __name__ == "__main__":
    main()
