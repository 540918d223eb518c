"""The recovery's byte-rate limit (``replicationRateByBytes``): its rate over time, and how
often it puts callers to sleep. A fake clock that only sleeping moves."""

from __future__ import annotations

import pytest

from pybkx.recovery.rate import BURST_S, MIN_SLEEP_S, ByteRate


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


RATE = 100_000_000
ADD = 64 << 10


def test_the_rate_over_time_is_the_limit() -> None:
    t = FakeTime()
    rate = ByteRate(RATE, clock=t.clock, sleep=t.sleep)
    total = 0
    for _ in range(3000):
        rate.take(ADD)
        total += ADD
    elapsed = t.now - 100.0
    # The first BURST_S' worth passes at once; the rest at the rate, short of at most the
    # debt a caller may leave unslept.
    expected = (total - RATE * BURST_S) / RATE
    assert expected - MIN_SLEEP_S <= elapsed <= expected + 1e-9


def test_small_debts_are_slept_off_together() -> None:
    t = FakeTime()
    rate = ByteRate(RATE, clock=t.clock, sleep=t.sleep)
    for _ in range(3000):
        rate.take(ADD)
    # Each add's own share is 0.66 ms; sleeping per add would be 3,000 sleeps, minus the burst.
    assert t.sleeps and min(t.sleeps) >= MIN_SLEEP_S
    assert len(t.sleeps) <= (t.now - 100.0) / MIN_SLEEP_S + 1


def test_a_large_take_sleeps_its_own_share() -> None:
    t = FakeTime()
    rate = ByteRate(10_000_000, clock=t.clock, sleep=t.sleep)
    rate.take(10_000_000 // 20)  # the burst: 50 ms' worth
    assert t.sleeps == []
    rate.take(1_000_000)  # 100 ms at 10 MB/s
    assert t.sleeps == [pytest.approx(0.1)]


@pytest.mark.parametrize("limit", [None, 0, -1])
def test_no_limit_never_sleeps(limit: int | None) -> None:
    t = FakeTime()
    rate = ByteRate(limit, clock=t.clock, sleep=t.sleep)
    for _ in range(1000):
        rate.take(1 << 20)
    assert rate.rate is None
    assert t.sleeps == []
