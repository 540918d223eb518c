//! The read-out contract: a [`Metric`] (name, kind, unit, labels, value) read from counters,
//! gauges and histograms when someone asks, groups that read themselves out ([`Export`],
//! [`named_stats!`](crate::named_stats)), labels and the flat view. It never formats for an
//! exporter.

use super::counter::{Counter, Gauge};
use super::histogram::{Histogram, HistogramSnapshot, OpStats, Unit};

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
