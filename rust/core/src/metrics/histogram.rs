//! Histograms kept with atomics: log-linear buckets (or fixed bounds), sharded per thread so
//! threads recording one histogram rarely share a cache line; snapshots of them; `OpStats`, a
//! pair of them by outcome. It records and snapshots; it never names or exports a metric.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use super::switch::{enabled, micros, now};

/// What a histogram's values measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Latencies, recorded in microseconds (exported in BookKeeper's milliseconds).
    Micros,
    Bytes,
    /// Plain numbers (entries per group, say).
    Count,
}

/// Sub-buckets per power of two: a value's bucket is at most 1/8 (12.5 %) wider than the
/// value, which bounds the error of a quantile read from the buckets.
const SUB_BITS: u32 = 3;
const SUBS: usize = 1 << SUB_BITS;
/// Values of 2^41 and more share the last bucket (25 days in microseconds, 2 TiB in bytes).
const MAX_MSB: u32 = 40;
const LOG_BUCKETS: usize = (MAX_MSB as usize - SUB_BITS as usize + 2) * SUBS + 1;
/// Shards per histogram; each thread records into one, chosen once per thread.
const SHARDS: usize = 4;

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard_index() -> usize {
    SHARD.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(i);
        }
        i
    })
}

/// Log-linear bucket of `v`: exact below 8, then 8 buckets per power of two, then one bucket
/// for everything from 2^41 on.
fn log_index(v: u64) -> usize {
    if v < SUBS as u64 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    if msb > MAX_MSB {
        return LOG_BUCKETS - 1;
    }
    let sub = (v >> (msb - SUB_BITS)) as usize & (SUBS - 1);
    (msb - SUB_BITS + 1) as usize * SUBS + sub
}

/// The largest value that falls into log-linear bucket `i`.
fn log_upper_bound(i: usize) -> u64 {
    if i < SUBS {
        return i as u64;
    }
    if i == LOG_BUCKETS - 1 {
        return u64::MAX;
    }
    let group = (i / SUBS) as u32; // >= 1
    let sub = (i % SUBS) as u64;
    let width_bits = group - 1;
    ((SUBS as u64 + sub) << width_bits) + (1u64 << width_bits) - 1
}

#[repr(align(64))]
struct Shard {
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Shard {
    fn new(buckets: usize) -> Shard {
        Shard {
            counts: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }
}

/// Buckets of a histogram: log-linear (for quantiles), or fixed upper bounds (a Prometheus
/// histogram with named buckets, such as BP-62's).
#[derive(Debug, Clone, Copy)]
enum Layout {
    Log,
    /// Inclusive upper bounds, ascending; values above the last go to a final +Inf bucket.
    Bounds(&'static [u64]),
}

/// A distribution of values (latencies, sizes), sharded by thread and read out on demand.
pub struct Histogram {
    unit: Unit,
    layout: Layout,
    shards: [Shard; SHARDS],
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("unit", &self.unit)
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

impl Histogram {
    /// Log-linear buckets: any quantile within 12.5 %.
    pub fn new(unit: Unit) -> Histogram {
        Histogram::with_layout(unit, Layout::Log)
    }

    /// Fixed buckets with these inclusive upper bounds (ascending), plus +Inf.
    pub fn with_bounds(unit: Unit, bounds: &'static [u64]) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        Histogram::with_layout(unit, Layout::Bounds(bounds))
    }

    fn with_layout(unit: Unit, layout: Layout) -> Histogram {
        let buckets = match layout {
            Layout::Log => LOG_BUCKETS,
            Layout::Bounds(b) => b.len() + 1,
        };
        Histogram {
            unit,
            layout,
            shards: std::array::from_fn(|_| Shard::new(buckets)),
        }
    }

    pub fn unit(&self) -> Unit {
        self.unit
    }

    fn index(&self, v: u64) -> usize {
        match self.layout {
            Layout::Log => log_index(v),
            Layout::Bounds(bounds) => bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len()),
        }
    }

    /// Records one value (nothing with metrics off).
    pub fn record(&self, v: u64) {
        if !enabled() {
            return;
        }
        let shard = &self.shards[shard_index()];
        shard.counts[self.index(v)].fetch_add(1, Ordering::Relaxed);
        shard.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// Records the microseconds from `start` to `end` (nothing if the timing never started).
    pub fn record_between(&self, start: Option<Instant>, end: Instant) {
        if let Some(t) = start {
            self.record(micros(end.saturating_duration_since(t)));
        }
    }

    /// Records the microseconds since `start` (nothing, and no clock read, if the timing never
    /// started); "now" is [`now`], shared by a batch when one set it.
    pub fn record_since(&self, start: Option<Instant>) {
        if let Some(t) = start {
            self.record(micros(now().saturating_duration_since(t)));
        }
    }

    /// All shards added up.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let n = self.shards[0].counts.len();
        let mut counts = vec![0u64; n];
        let mut sum = 0u64;
        for shard in &self.shards {
            for (total, c) in counts.iter_mut().zip(shard.counts.iter()) {
                *total += c.load(Ordering::Relaxed);
            }
            sum = sum.wrapping_add(shard.sum.load(Ordering::Relaxed));
        }
        let count = counts.iter().sum();
        let buckets = match self.layout {
            Layout::Log => counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| (log_upper_bound(i), *c))
                .collect(),
            Layout::Bounds(bounds) => bounds
                .iter()
                .copied()
                .chain(std::iter::once(u64::MAX))
                .zip(counts)
                .collect(),
        };
        HistogramSnapshot {
            buckets,
            count,
            sum,
        }
    }
}

/// A histogram at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// `(inclusive upper bound, count)` per bucket, ascending; `u64::MAX` is +Inf. A
    /// log-linear histogram lists only buckets that hold values; a fixed one lists them all.
    pub buckets: Vec<(u64, u64)>,
    pub count: u64,
    pub sum: u64,
}

impl HistogramSnapshot {
    /// Adds `other` in (same layout, or both log-linear).
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        let (a, b) = (&self.buckets, &other.buckets);
        let mut merged = Vec::with_capacity(a.len().max(b.len()));
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) if x.0 == y.0 => {
                    merged.push((x.0, x.1 + y.1));
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x.0 < y.0 => {
                    merged.push(*x);
                    i += 1;
                }
                (Some(x), None) => {
                    merged.push(*x);
                    i += 1;
                }
                (_, Some(y)) => {
                    merged.push(*y);
                    j += 1;
                }
                (None, None) => break,
            }
        }
        self.buckets = merged;
        self.count += other.count;
        self.sum = self.sum.wrapping_add(other.sum);
    }
}

/// An operation's latency (or size) split by outcome, as BookKeeper's `OpStatsLogger`.
#[derive(Debug)]
pub struct OpStats {
    pub ok: Histogram,
    pub failed: Histogram,
}

impl OpStats {
    pub fn new(unit: Unit) -> OpStats {
        OpStats {
            ok: Histogram::new(unit),
            failed: Histogram::new(unit),
        }
    }

    /// Latencies in microseconds.
    pub fn latency() -> OpStats {
        OpStats::new(Unit::Micros)
    }

    pub fn record(&self, success: bool, v: u64) {
        if success { &self.ok } else { &self.failed }.record(v);
    }

    pub fn record_since(&self, success: bool, start: Option<Instant>) {
        if success { &self.ok } else { &self.failed }.record_since(start);
    }

    pub fn record_between(&self, success: bool, start: Option<Instant>, end: Instant) {
        if success { &self.ok } else { &self.failed }.record_between(start, end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_buckets_bound_every_value_within_an_eighth() {
        let mut last = 0usize;
        for v in (0..5000u64).chain((12..41).map(|s| (1u64 << s) + 12345)) {
            let i = log_index(v);
            assert!(i >= last, "bucket order at {v}");
            last = i;
            let upper = log_upper_bound(i);
            assert!(v <= upper, "{v} above its bucket's bound {upper}");
            if v >= SUBS as u64 {
                assert!(upper - v <= v / 8, "{v}: bucket bound {upper} too wide");
            }
            if i > 0 {
                assert!(log_upper_bound(i - 1) < v, "{v} fits an earlier bucket");
            }
        }
        assert_eq!(log_index(u64::MAX), LOG_BUCKETS - 1);
        assert_eq!(log_upper_bound(LOG_BUCKETS - 1), u64::MAX);
        assert!(log_index((1u64 << 41) - 1) < LOG_BUCKETS - 1);
    }
}
