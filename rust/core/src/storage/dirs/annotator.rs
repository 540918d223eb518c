//! Annotators: how hot each entry log is, for demotion (the coldest logs of a full tier move
//! down) and promotion (Alluxio's worker block annotators, applied to entry logs). Every read
//! and every append touches its log's [`Heat`] with a few atomic operations and no lock; the
//! mover ranks the logs of a tier by [`Annotator::score`] when it needs to move some.
//!
//! Both schemes count time in accesses: one logical clock shared by all logs advances by one at
//! every access (Alluxio's logical clock).
//! - `LRUAnnotator` (the default): a log's score is the clock value of its last access: the log
//!   touched longest ago is the coldest.
//! - `LRFUAnnotator`: a log's score is its combined recency and frequency,
//!   `CRF(now) = Σ F(now - t)` over the clock values `t` of its accesses, with
//!   `F(x) = (1 / attenuation) ^ (step * x)`; kept incrementally as
//!   `CRF(t') = CRF(t) * F(t' - t) + F(0)` at each access. `step` (`lrfuStepFactor`, 0 to 1,
//!   default 0.25) near 0 makes it LFU (counts), near 1 LRU; `attenuation`
//!   (`lrfuAttenuationFactor`, at least 2, default 2.0) is how fast old accesses fade.
//!
//! A log not touched since the bookie started has score 0: colder than every touched log;
//! ties go to the older (lower) log id first.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Result, StorageError};

/// Alluxio's defaults for `lrfuStepFactor` and `lrfuAttenuationFactor`.
pub const DEFAULT_LRFU_STEP: f64 = 0.25;
pub const DEFAULT_LRFU_ATTENUATION: f64 = 2.0;

/// The ranking scheme (`entryLogAnnotatorClass`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scheme {
    Lru,
    Lrfu { step: f64, attenuation: f64 },
}

/// One entry log's access record: updated with atomics only.
#[derive(Debug, Default)]
pub struct Heat {
    /// Logical clock of the last access (0: never accessed).
    last: AtomicU64,
    /// LRFU: the CRF as of `last`, as `f64` bits.
    crf: AtomicU64,
}

impl Heat {
    /// The clock value of the last access (0: never).
    pub fn last_access(&self) -> u64 {
        self.last.load(Ordering::Relaxed)
    }
}

/// Ranks entry logs from hot to cold.
#[derive(Debug)]
pub struct Annotator {
    scheme: Scheme,
    clock: AtomicU64,
}

impl Annotator {
    pub fn new(scheme: Scheme) -> Self {
        Annotator {
            scheme,
            clock: AtomicU64::new(0),
        }
    }

    /// The annotator named `name` (`entryLogAnnotatorClass`, with or without a package
    /// prefix), with LRFU's factors. Raises InvalidArgument for an unknown name or factors out
    /// of range (step in [0, 1], attenuation at least 2).
    pub fn by_name(name: &str, step: f64, attenuation: f64) -> Result<Self> {
        let scheme = match name.rsplit('.').next().unwrap_or(name) {
            "LRUAnnotator" => Scheme::Lru,
            "LRFUAnnotator" => {
                let valid =
                    (0.0..=1.0).contains(&step) && (2.0..f64::INFINITY).contains(&attenuation);
                if !valid {
                    return Err(StorageError::InvalidArgument(format!(
                        "lrfuStepFactor must be in [0, 1] and lrfuAttenuationFactor at least 2, \
                         got {step} and {attenuation}"
                    )));
                }
                Scheme::Lrfu { step, attenuation }
            }
            other => {
                return Err(StorageError::InvalidArgument(format!(
                    "entryLogAnnotatorClass {other:?} is not one of LRUAnnotator, LRFUAnnotator"
                )))
            }
        };
        Ok(Self::new(scheme))
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The logical clock now (the number of accesses so far).
    pub fn now(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }

    /// Records one access to the log of `heat`. Lock-free: one shared atomic increment and one
    /// or two per-log atomic updates. Concurrent accesses to one log may fold in slightly out of
    /// order (the LRFU score then misses a fraction of one access's decay); the ranking stays
    /// right to within that.
    pub fn touch(&self, heat: &Heat) {
        let t = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        let prev = heat.last.fetch_max(t, Ordering::Relaxed);
        if let Scheme::Lrfu { step, attenuation } = self.scheme {
            let decay = if prev == 0 {
                0.0
            } else {
                weight(step, attenuation, t.saturating_sub(prev))
            };
            let mut cur = heat.crf.load(Ordering::Relaxed);
            loop {
                let next = (f64::from_bits(cur) * decay + 1.0).to_bits();
                match heat.crf.compare_exchange_weak(
                    cur,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(seen) => cur = seen,
                }
            }
        }
    }

    /// How hot the log of `heat` is at clock `now` (higher is hotter; 0: never accessed).
    pub fn score(&self, heat: &Heat, now: u64) -> f64 {
        let last = heat.last.load(Ordering::Relaxed);
        match self.scheme {
            Scheme::Lru => last as f64,
            Scheme::Lrfu { step, attenuation } => {
                if last == 0 {
                    return 0.0;
                }
                f64::from_bits(heat.crf.load(Ordering::Relaxed))
                    * weight(step, attenuation, now.saturating_sub(last))
            }
        }
    }

    /// `ids` with their heats, coldest first (ties: lower id first).
    pub fn coldest_first<'a, I>(&self, logs: I) -> Vec<u32>
    where
        I: IntoIterator<Item = (u32, &'a Heat)>,
    {
        let now = self.now();
        let mut ranked: Vec<(f64, u32)> = logs
            .into_iter()
            .map(|(id, heat)| (self.score(heat, now), id))
            .collect();
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        ranked.into_iter().map(|(_, id)| id).collect()
    }
}

/// Alluxio's `F(x) = (1 / attenuation) ^ (step * x)`.
pub fn weight(step: f64, attenuation: f64, x: u64) -> f64 {
    (1.0 / attenuation).powf(step * x as f64)
}

#[cfg(test)]
mod tests {
    //! The annotators against their definitions: LRU ranks by the last access, LRFU's
    //! incremental CRF equals the sum over all accesses of `F(now - t)`, LRFU with the
    //! factors at LRU's end ranks as LRU, and at LFU's end by access counts.

    use proptest::prelude::*;

    use super::*;

    /// Replays `accesses` (log indices) on `n` logs; returns the annotator, the heats and each
    /// log's access clock values.
    fn replay(
        scheme: Scheme,
        n: usize,
        accesses: &[usize],
    ) -> (Annotator, Vec<Heat>, Vec<Vec<u64>>) {
        let a = Annotator::new(scheme);
        let heats: Vec<Heat> = (0..n).map(|_| Heat::default()).collect();
        let mut times = vec![Vec::new(); n];
        for &i in accesses {
            a.touch(&heats[i]);
            times[i].push(a.now());
        }
        (a, heats, times)
    }

    fn lrfu() -> impl Strategy<Value = Scheme> {
        (0.0f64..=1.0, 2.0f64..8.0)
            .prop_map(|(step, attenuation)| Scheme::Lrfu { step, attenuation })
    }

    proptest! {
        #[test]
        fn lru_ranks_by_last_access(accesses in prop::collection::vec(0usize..6, 0..60)) {
            let (a, heats, times) = replay(Scheme::Lru, 6, &accesses);
            let order = a.coldest_first(heats.iter().enumerate().map(|(i, h)| (i as u32, h)));
            // Expected: never-accessed logs (by id), then by last access, oldest first.
            let mut expected: Vec<(u64, u32)> = times
                .iter()
                .enumerate()
                .map(|(i, t)| (t.last().copied().unwrap_or(0), i as u32))
                .collect();
            expected.sort();
            let expected: Vec<u32> = expected.into_iter().map(|(_, i)| i).collect();
            prop_assert_eq!(order, expected);
        }

        #[test]
        fn lrfu_score_is_the_sum_of_decayed_accesses(
            scheme in lrfu(),
            accesses in prop::collection::vec(0usize..4, 0..80),
            later in 0u64..50,
        ) {
            let (a, heats, times) = replay(scheme, 4, &accesses);
            let Scheme::Lrfu { step, attenuation } = scheme else { unreachable!() };
            let now = a.now() + later;
            for (heat, ts) in heats.iter().zip(&times) {
                let expected: f64 = ts.iter().map(|t| weight(step, attenuation, now - t)).sum();
                let got = a.score(heat, now);
                prop_assert!((got - expected).abs() <= 1e-9 * expected.max(1.0),
                    "score {} != definition {}", got, expected);
            }
        }

        #[test]
        fn lrfu_at_the_lru_end_ranks_as_lru(
            attenuation in 2.0f64..8.0,
            accesses in prop::collection::vec(0usize..6, 0..40),
        ) {
            let lrfu = Scheme::Lrfu { step: 1.0, attenuation };
            let (a, heats, _) = replay(lrfu, 6, &accesses);
            let (l, lheats, _) = replay(Scheme::Lru, 6, &accesses);
            prop_assert_eq!(
                a.coldest_first(heats.iter().enumerate().map(|(i, h)| (i as u32, h))),
                l.coldest_first(lheats.iter().enumerate().map(|(i, h)| (i as u32, h))),
            );
        }

        #[test]
        fn lrfu_at_the_lfu_end_ranks_by_access_count(
            accesses in prop::collection::vec(0usize..6, 0..60),
        ) {
            let lfu = Scheme::Lrfu { step: 0.0, attenuation: 2.0 };
            let (a, heats, times) = replay(lfu, 6, &accesses);
            let order = a.coldest_first(heats.iter().enumerate().map(|(i, h)| (i as u32, h)));
            let mut expected: Vec<(usize, u32)> =
                times.iter().enumerate().map(|(i, t)| (t.len(), i as u32)).collect();
            expected.sort();
            let expected: Vec<u32> = expected.into_iter().map(|(_, i)| i).collect();
            prop_assert_eq!(order, expected);
        }

        #[test]
        fn an_access_never_cools_a_log(
            scheme in prop_oneof![Just(Scheme::Lru), lrfu()],
            accesses in prop::collection::vec(0usize..4, 1..40),
            which in 0usize..4,
        ) {
            let (a, heats, _) = replay(scheme, 4, &accesses);
            let before: Vec<f64> = heats.iter().map(|h| a.score(h, a.now() + 1)).collect();
            a.touch(&heats[which]);
            let after = a.score(&heats[which], a.now());
            prop_assert!(after >= before[which]);
            // The touched log is now at least as hot as any log it was hotter than or tied with.
            for (i, h) in heats.iter().enumerate() {
                if before[i] <= before[which] {
                    prop_assert!(a.score(h, a.now()) <= after);
                }
            }
        }
    }

    #[test]
    fn names_and_factors_are_checked() {
        assert_eq!(
            Annotator::by_name("alluxio.worker.block.annotator.LRUAnnotator", 0.25, 2.0)
                .unwrap()
                .scheme(),
            Scheme::Lru
        );
        assert!(Annotator::by_name("LRFUAnnotator", 0.25, 2.0).is_ok());
        assert!(Annotator::by_name("LRFUAnnotator", 1.5, 2.0).is_err());
        assert!(Annotator::by_name("LRFUAnnotator", 0.25, 1.0).is_err());
        assert!(Annotator::by_name("FIFOAnnotator", 0.25, 2.0).is_err());
    }

    #[test]
    fn concurrent_touches_count_every_access() {
        let a = std::sync::Arc::new(Annotator::new(Scheme::Lrfu {
            step: 0.0,
            attenuation: 2.0,
        }));
        let heat = std::sync::Arc::new(Heat::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (a, heat) = (a.clone(), heat.clone());
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        a.touch(&heat);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // step 0: no decay, the score is the number of accesses.
        assert_eq!(a.score(&heat, a.now()), 40_000.0);
        assert_eq!(heat.last_access(), 40_000);
    }
}
