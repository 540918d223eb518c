"""The history checker on hand-made histories: a clean one passes, and each rule catches the
history that breaks it, naming the smallest slice of events that shows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checker import check, load_history

L = 7


def ack(entry: int, t: float, payload: str = "", sent: float | None = None) -> dict[str, Any]:
    digest = payload or f"h{entry}"
    return {
        "type": "append",
        "ledger": L,
        "t": t,
        "sent": t - 0.01 if sent is None else sent,
        "status": "ok",
        "entry": entry,
        "hash": digest,
        "size": 10 + entry,
    }


def read(
    entries: list[int], t: float, reader: str = "r", final: bool = False, **other: str
) -> dict[str, Any]:
    rows = [[e, other.get(str(e), f"h{e}"), 10 + e] for e in entries]
    return {"type": "read", "ledger": L, "t": t, "reader": reader, "entries": rows, "final": final}


def close(last: int, t: float, length: int | None = None) -> dict[str, Any]:
    want = sum(10 + e for e in range(last + 1))
    return {
        "type": "close",
        "ledger": L,
        "t": t,
        "last_entry": last,
        "length": want if length is None else length,
    }


def lac(value: int, t: float, observer: str = "w") -> dict[str, Any]:
    return {"type": "lac", "ledger": L, "t": t, "observer": observer, "lac": value}


def clean() -> list[dict[str, Any]]:
    return [
        ack(0, 1.0),
        ack(1, 1.1),
        lac(0, 1.15),
        read([0, 1], 1.2),
        {
            "type": "append",
            "ledger": L,
            "t": 1.3,
            "sent": 1.25,
            "status": "unknown",
            "hash": "x",
            "size": 3,
        },
        ack(2, 1.4),
        lac(1, 1.5),
        {"type": "fence", "ledger": L, "t": 2.0},
        {
            "type": "append",
            "ledger": L,
            "t": 2.2,
            "sent": 2.1,
            "status": "fail",
            "hash": "y",
            "size": 3,
        },
        close(2, 2.0),
        read([0, 1, 2], 3.0, reader="verify", final=True),
        read([1, 2], 3.1, reader="other"),
    ]


def test_a_clean_history_passes() -> None:
    result = check(clean())
    assert result.ok, result.report()
    assert result.acknowledged == 3
    assert result.counts["append"] == 5


def test_an_acknowledged_entry_missing_from_the_final_read_is_lost() -> None:
    history = [*clean()[:-2], read([0, 1], 3.0, reader="verify", final=True)]
    result = check(history)
    assert result.by_kind() == {"lost": 1}
    v = result.violations[0]
    assert "entry 2 missing" in v.message
    assert [e["type"] for e in v.events] == ["append", "read"]
    assert v.events[0]["entry"] == 2


def test_a_close_before_an_acknowledged_entry_loses_it() -> None:
    history = [e for e in clean() if e["type"] != "close"] + [close(1, 2.0)]
    history = [e for e in history if not e.get("final")]
    result = check(history)
    assert result.by_kind() == {"lost": 1}
    assert "closed at last entry 1" in result.violations[0].message


def test_an_acknowledged_payload_read_back_differently_is_lost() -> None:
    history = [*clean(), read([0, 1, 2], 3.2, reader="late", **{"1": "other"})]
    kinds = check(history).by_kind()
    # The two reads disagree, and the acknowledged payload is not what was read.
    assert kinds == {"diverged": 1, "lost": 1}


def test_readers_disagreeing_or_skipping_an_entry_diverge() -> None:
    gap = check([*clean(), read([0, 2], 3.3, reader="gap")])
    assert gap.by_kind() == {"diverged": 1}
    assert "not contiguous: entry 0 then 2" in gap.violations[0].message
    two = check([read([0, 1], 1.0, reader="a"), read([0, 1], 1.1, reader="b", **{"0": "z"})])
    assert two.by_kind() == {"diverged": 1}
    assert [e["reader"] for e in two.violations[0].events] == ["a", "b"]


def test_an_ack_for_an_add_sent_after_the_fence() -> None:
    late = ack(3, 2.5, sent=2.4)
    history = [*clean(), late]
    history = [e for e in history if e["type"] != "close" and not e.get("final")]
    result = check(history)
    assert result.by_kind() == {"ack_after_fence": 1}
    assert [e["type"] for e in result.violations[0].events] == ["fence", "append"]
    # An add sent before the fence and acknowledged just after it is not a violation.
    before = [e for e in clean() if e["type"] != "close" and not e.get("final")]
    assert check([*before, ack(3, 2.05, sent=1.9), close(3, 2.0)]).ok


def test_the_lac_going_backwards_for_one_observer() -> None:
    result = check([lac(5, 1.0), lac(3, 1.1, observer="other"), lac(4, 1.2), lac(6, 1.3)])
    assert result.by_kind() == {"lac_backwards": 1}
    assert "saw LAC 5 then 4" in result.violations[0].message


def test_a_wrong_closed_length_or_two_closes_that_disagree() -> None:
    wrong = [e for e in clean() if e["type"] != "close"] + [close(2, 2.0, length=1)]
    result = check(wrong)
    assert result.by_kind() == {"bad_length": 1}
    assert "closed length 1 but entries 0..2 hold 33 bytes" in result.violations[0].message
    both = check([*clean(), close(2, 4.0, length=34)])
    assert both.by_kind() == {"bad_length": 2}


def test_histories_load_from_json_lines_with_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in clean()) + '{"type": "app')
    assert check(load_history(path)).ok
