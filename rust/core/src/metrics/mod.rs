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

mod counter;
mod export;
mod histogram;
mod switch;
#[cfg(test)]
mod tests;

pub use counter::{Counter, Gauge};
pub use export::{flat, label_all, Export, Exported, Kind, Metric, Value};
pub use histogram::{Histogram, HistogramSnapshot, OpStats, Unit};
pub use switch::{enabled, micros, now, set_enabled, start, with_now};
