//! Counters kept with atomics on the hot path and read out only when someone asks (a scrape,
//! a log line, a benchmark). It owns the counter types and the read-out contract; it never
//! formats for a particular exporter (the Python side turns snapshots into Prometheus text).

use std::sync::atomic::{AtomicU64, Ordering};

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

/// Named values at one moment, names next to the counters that hold them.
pub type Snapshot = Vec<(&'static str, u64)>;

/// A group of counters that can report itself by name.
pub trait Stats {
    /// Appends `(name, value)` for every counter of the group.
    fn snapshot_into(&self, out: &mut Snapshot);

    fn snapshot(&self) -> Snapshot {
        let mut out = Vec::new();
        self.snapshot_into(&mut out);
        out
    }
}

/// Implements [`Stats`] for a struct of [`Counter`]/[`Gauge`] fields, named after the fields
/// (with an optional prefix: `named_stats!(T, "journal_" { a, b })` names `journal_a`).
#[macro_export]
macro_rules! named_stats {
    ($ty:ty { $($field:ident),* $(,)? }) => {
        $crate::named_stats!($ty, "" { $($field),* });
    };
    ($ty:ty, $prefix:literal { $($field:ident),* $(,)? }) => {
        impl $crate::metrics::Stats for $ty {
            fn snapshot_into(&self, out: &mut $crate::metrics::Snapshot) {
                $(out.push((concat!($prefix, stringify!($field)), self.$field.get()));)*
            }
        }
    };
}

/// Adds `more` into `into`, summing values of the same name (several journals, say).
pub fn merge(into: &mut Snapshot, more: Snapshot) {
    for (name, v) in more {
        match into.iter_mut().find(|(n, _)| *n == name) {
            Some((_, total)) => *total += v,
            None => into.push((name, v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Example {
        adds: Counter,
        open: Gauge,
    }
    crate::named_stats!(Example { adds, open });

    #[test]
    fn snapshots_name_every_field() {
        let e = Example::default();
        e.adds.add(3);
        e.open.inc();
        e.open.inc();
        e.open.dec();
        assert_eq!(e.snapshot(), vec![("adds", 3), ("open", 1)]);
    }
}
