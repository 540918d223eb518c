//! Histogram buckets and quantile bounds, sharded recording, snapshots merged, the switch, the
//! read-out of named groups.

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
