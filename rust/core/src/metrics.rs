//! Counters, gauges and histograms kept with atomics on the hot path and read out only when
//! someone asks (a scrape, a log line, a benchmark). It owns the metric types, the process-wide
//! on/off switch and the read-out contract ([`Metric`]); it never formats for an exporter (the
//! Python side turns metrics into Prometheus text, quantiles included).
//!
//! Cost on the hot path: a counter is one relaxed `fetch_add`; a histogram record is two, on a
//! shard picked per thread (so threads recording the same histogram rarely share a cache line);
//! a timing is one clock read at its start and one at its end. With metrics switched off
//! ([`set_enabled`], BookKeeper's `enableStatistics=false`) timings read no clock and histograms
//! record nothing; plain counters keep counting (they are a single add and some are also limits).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Switches histogram and timing collection on or off for the whole process.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether histograms and timings are collected (default: yes).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The start of a timing: the current instant, or None (no clock read) with metrics off.
pub fn start() -> Option<Instant> {
    enabled().then(Instant::now)
}

thread_local! {
    static NOW_HINT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The current time: the instant a batch being completed on this thread shares (see
/// [`with_now`]), else a clock read.
pub fn now() -> Instant {
    NOW_HINT.with(|h| h.get()).unwrap_or_else(Instant::now)
}

/// Runs `f` with `now` (if any) as the current time of this thread: completions run in a
/// batch (a journal group, say) time themselves with one shared clock read.
pub fn with_now<R>(now: Option<Instant>, f: impl FnOnce() -> R) -> R {
    let before = NOW_HINT.with(|h| h.replace(now));
    let result = f();
    NOW_HINT.with(|h| h.set(before));
    result
}

/// Whole microseconds in a duration, saturating.
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A monotonically increasing count. Relaxed ordering: counts are statistics, not signals.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down (open connections, queued bytes).
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn sub(&self, n: u64) {
        self.0.fetch_sub(n, Ordering::Relaxed);
    }

    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

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

/// How a metric is exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// Quantiles, count and sum per outcome (`success="true"|"false"`), as BookKeeper.
    Summary,
    /// Cumulative buckets (`le`), count and sum.
    Histogram,
}

/// A metric's value at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Int(u64),
    Outcomes {
        ok: HistogramSnapshot,
        failed: HistogramSnapshot,
    },
    Distribution(HistogramSnapshot),
}

/// One named metric read out: the name is the exported one (BookKeeper's where it has one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub labels: Vec<(&'static str, String)>,
    pub value: Value,
}

impl Metric {
    pub fn counter(name: &'static str, v: u64) -> Metric {
        Metric::int(name, Kind::Counter, v)
    }

    pub fn gauge(name: &'static str, v: u64) -> Metric {
        Metric::int(name, Kind::Gauge, v)
    }

    fn int(name: &'static str, kind: Kind, v: u64) -> Metric {
        Metric {
            name,
            kind,
            unit: Unit::Count,
            labels: Vec::new(),
            value: Value::Int(v),
        }
    }

    /// The integer value of a counter or gauge.
    pub fn int_value(&self) -> Option<u64> {
        match self.value {
            Value::Int(v) => Some(v),
            _ => None,
        }
    }
}

/// Something that reads out as one metric under a given name.
pub trait Exported {
    fn metric(&self, name: &'static str) -> Metric;
}

impl Exported for Counter {
    fn metric(&self, name: &'static str) -> Metric {
        Metric::counter(name, self.get())
    }
}

impl Exported for Gauge {
    fn metric(&self, name: &'static str) -> Metric {
        Metric::gauge(name, self.get())
    }
}

impl Exported for OpStats {
    fn metric(&self, name: &'static str) -> Metric {
        Metric {
            name,
            kind: Kind::Summary,
            unit: self.ok.unit(),
            labels: Vec::new(),
            value: Value::Outcomes {
                ok: self.ok.snapshot(),
                failed: self.failed.snapshot(),
            },
        }
    }
}

impl Exported for Histogram {
    fn metric(&self, name: &'static str) -> Metric {
        Metric {
            name,
            kind: Kind::Histogram,
            unit: self.unit(),
            labels: Vec::new(),
            value: Value::Distribution(self.snapshot()),
        }
    }
}

/// A group of metrics that reads itself out.
pub trait Export {
    /// Appends every metric of the group.
    fn export(&self, out: &mut Vec<Metric>);

    fn metrics(&self) -> Vec<Metric> {
        let mut out = Vec::new();
        self.export(&mut out);
        out
    }
}

/// Implements [`Export`] for a struct of metric fields, each under its exported name:
/// `named_stats!(T { adds => "bookie_ADDS", open => "pybkx_open" })`.
#[macro_export]
macro_rules! named_stats {
    ($ty:ty { $($field:ident => $name:literal),* $(,)? }) => {
        impl $crate::metrics::Export for $ty {
            fn export(&self, out: &mut Vec<$crate::metrics::Metric>) {
                $(out.push($crate::metrics::Exported::metric(&self.$field, $name));)*
            }
        }
    };
}

/// Adds a label to every metric of `metrics` (a journal's index, say).
pub fn label_all(metrics: &mut [Metric], key: &'static str, value: &str) {
    for m in metrics {
        m.labels.push((key, value.to_string()));
    }
}

/// Counters and gauges by name, values of the same name added up (several journals, say):
/// the flat view for logs, benchmarks and tests.
pub fn flat(metrics: &[Metric]) -> Vec<(&'static str, u64)> {
    let mut out: Vec<(&'static str, u64)> = Vec::new();
    for m in metrics {
        let Some(v) = m.int_value() else {
            continue;
        };
        match out.iter_mut().find(|(n, _)| *n == m.name) {
            Some((_, total)) => *total += v,
            None => out.push((m.name, v)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Example {
        adds: Counter,
        open: Gauge,
    }
    crate::named_stats!(Example {
        adds => "example_ADDS",
        open => "example_OPEN",
    });

    #[test]
    fn exports_name_every_field() {
        let e = Example::default();
        e.adds.add(3);
        e.open.inc();
        e.open.inc();
        e.open.dec();
        assert_eq!(
            flat(&e.metrics()),
            vec![("example_ADDS", 3), ("example_OPEN", 1)]
        );
        assert_eq!(e.metrics()[0].kind, Kind::Counter);
    }

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

    #[test]
    fn histograms_add_up_across_threads() {
        let h = std::sync::Arc::new(Histogram::new(Unit::Micros));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let h = h.clone();
                std::thread::spawn(move || {
                    for v in 0..1000u64 {
                        h.record(v + t);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = h.snapshot();
        assert_eq!(s.count, 8000);
        assert_eq!(
            s.sum,
            (0..8u64)
                .map(|t| (0..1000).map(|v| v + t).sum::<u64>())
                .sum()
        );
        assert_eq!(s.buckets.iter().map(|b| b.1).sum::<u64>(), 8000);
        let mut twice = s.clone();
        twice.merge(&s);
        assert_eq!(twice.count, 16000);
        assert_eq!(twice.buckets.len(), s.buckets.len());
    }

    #[test]
    fn fixed_bounds_are_prometheus_le_buckets() {
        static BOUNDS: [u64; 3] = [5, 10, 20];
        let h = Histogram::with_bounds(Unit::Bytes, &BOUNDS);
        for v in [0, 5, 6, 10, 21, 1000] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![(5, 2), (10, 2), (20, 0), (u64::MAX, 2)]);
        assert_eq!((s.count, s.sum), (6, 1042));
    }
}
