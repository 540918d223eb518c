//! The dynamic part of a read order (BookKeeper's `reorderReadSequence` fed with
//! `BookiesHealthInfo`): the placement policy's static order for an entry, rearranged by what
//! the client saw of each bookie lately. Healthy replicas first in the given order, then those
//! that failed within `bookieFailureHistoryExpirationMSec` (the earliest failure first), then
//! those that were slow in that time (the fewest pending requests first), then the avoided
//! ones. With `readReorderThresholdPendingRequests` set, the least-loaded replica goes first
//! when the first has that many more requests pending (and slow answers do not reorder, as in
//! BookKeeper). It reads figures and never sends.

use std::collections::HashSet;

use crate::bookie_conn::{BookieClient, HealthFigures};
use crate::config::ReadPolicy;

/// Rearranges `replicas` (in the static read order, `avoid`ed ones last) by their health.
pub(super) fn by_health(
    client: &BookieClient,
    replicas: &mut Vec<String>,
    avoid: &HashSet<String>,
) {
    let policy = client.read_policy();
    if !policy.reorder_read_sequence || replicas.len() < 2 {
        return;
    }
    let figures: Vec<HealthFigures> = replicas.iter().map(|b| client.bookie_health(b)).collect();
    let avoided: Vec<bool> = replicas.iter().map(|b| avoid.contains(b)).collect();
    let order = health_order(&policy, &figures, &avoided);
    if order.iter().enumerate().any(|(at, i)| at != *i) {
        let mut taken: Vec<Option<String>> = replicas.drain(..).map(Some).collect();
        replicas.extend(order.iter().filter_map(|i| taken[*i].take()));
    }
}

/// The order (indexes into `figures`) to read replicas in: pure, unit-tested below.
fn health_order(policy: &ReadPolicy, figures: &[HealthFigures], avoided: &[bool]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..figures.len()).collect();
    let threshold = policy.reorder_threshold_pending;
    if threshold > 0 {
        let best = (0..figures.len()).min_by_key(|i| figures[*i].pending);
        if let Some(best) = best.filter(|b| *b > 0) {
            if figures[0].pending >= figures[best].pending.saturating_add(threshold) {
                order.remove(best);
                order.insert(0, best);
            }
        }
    }
    let recent =
        |since: Option<std::time::Duration>| since.is_some_and(|d| d < policy.failure_history);
    // (class, rank within it): the sort is stable, so equal keys keep the given order.
    let key = |i: usize| -> (u8, u64) {
        let f = &figures[i];
        if avoided[i] {
            (3, 0)
        } else if policy.failure_tracking && recent(f.since_failure) {
            // The earliest failure first: the longest ago ranks lowest.
            let ago = f.since_failure.map_or(0, |d| d.as_millis() as u64);
            (1, u64::MAX - ago)
        } else if threshold == 0 && recent(f.since_slow) {
            (2, f.pending)
        } else {
            (0, 0)
        }
    };
    order.sort_by_key(|i| key(*i));
    order
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn healthy(pending: u64) -> HealthFigures {
        HealthFigures {
            pending,
            ..HealthFigures::default()
        }
    }

    fn failed(ago_ms: u64) -> HealthFigures {
        HealthFigures {
            since_failure: Some(Duration::from_millis(ago_ms)),
            failures: 1,
            ..HealthFigures::default()
        }
    }

    fn slow(pending: u64) -> HealthFigures {
        HealthFigures {
            pending,
            since_slow: Some(Duration::from_millis(10)),
            slow_answers: 1,
            ..HealthFigures::default()
        }
    }

    #[test]
    fn healthy_replicas_keep_the_given_order() {
        let p = ReadPolicy::default();
        let order = health_order(&p, &[healthy(5), healthy(0), healthy(9)], &[false; 3]);
        assert_eq!(order, vec![0, 1, 2]);
    }

    #[test]
    fn failed_then_slow_then_avoided_replicas_go_last() {
        let p = ReadPolicy::default();
        let figures = [slow(3), failed(100), healthy(0), slow(1), failed(5000)];
        let avoided = [false, false, false, false, false];
        // Healthy, failures (the earliest first), slow ones (fewest pending first).
        assert_eq!(health_order(&p, &figures, &avoided), vec![2, 4, 1, 3, 0]);
        let avoided = [false, false, true, false, false];
        assert_eq!(health_order(&p, &figures, &avoided), vec![4, 1, 3, 0, 2]);
    }

    #[test]
    fn old_failures_and_slow_answers_expire() {
        let p = ReadPolicy {
            failure_history: Duration::from_millis(50),
            ..ReadPolicy::default()
        };
        let order = health_order(&p, &[failed(60), healthy(0)], &[false; 2]);
        assert_eq!(order, vec![0, 1]);
        let untracked = ReadPolicy {
            failure_tracking: false,
            ..ReadPolicy::default()
        };
        assert_eq!(
            health_order(&untracked, &[failed(1), healthy(0)], &[false; 2]),
            vec![0, 1]
        );
    }

    #[test]
    fn a_loaded_first_replica_yields_to_the_least_loaded_past_the_threshold() {
        let p = ReadPolicy {
            reorder_threshold_pending: 10,
            ..ReadPolicy::default()
        };
        let figures = [healthy(11), healthy(5), healthy(2)];
        assert_eq!(health_order(&p, &figures, &[false; 3]), vec![0, 1, 2]);
        let figures = [healthy(12), healthy(5), healthy(1)];
        assert_eq!(health_order(&p, &figures, &[false; 3]), vec![2, 0, 1]);
        // With a threshold, slow answers do not reorder (BookKeeper keeps no slow list then).
        assert_eq!(
            health_order(&p, &[slow(0), healthy(0)], &[false; 2]),
            vec![0, 1]
        );
    }
}
