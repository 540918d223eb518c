//! BookKeeper's placement arithmetic, written once for the writer, the reader and the binding:
//! which ensemble positions hold an entry (round robin) and which quorum sizes are valid. It
//! never chooses bookies: the placement policy above does.

use super::error::LedgerError;

/// Write set of `entry` in an ensemble of `e` with write quorum `qw`.
pub fn write_set(entry: i64, e: usize, qw: usize) -> impl Iterator<Item = usize> {
    let e64 = e.max(1) as i64;
    (0..qw as i64).map(move |i| (entry + i).rem_euclid(e64) as usize)
}

/// BookKeeper's rule for quorums: E >= Qw >= Qa >= 1. Signed, as callers give the sizes (a
/// negative one is refused by the rule, not by a conversion).
pub fn check_quorums(e: i64, qw: i64, qa: i64) -> Result<(), LedgerError> {
    if e >= qw && qw >= qa && qa >= 1 {
        Ok(())
    } else {
        Err(LedgerError::InvalidArgument(format!(
            "need ensemble size >= write quorum >= ack quorum >= 1, got {e}/{qw}/{qa}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorums_need_e_at_least_qw_at_least_qa_at_least_one() {
        assert!(check_quorums(3, 2, 2).is_ok());
        assert!(check_quorums(3, 3, 3).is_ok());
        assert!(check_quorums(2, 3, 2).is_err());
        assert!(check_quorums(3, 2, 3).is_err());
        assert!(check_quorums(3, 2, 0).is_err());
        assert!(check_quorums(-1, 2, 2).is_err());
        assert!(check_quorums(3, 2, -1).is_err());
    }

    #[test]
    fn write_sets_go_round_the_ensemble() {
        assert_eq!(write_set(0, 3, 2).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(write_set(2, 3, 2).collect::<Vec<_>>(), vec![2, 0]);
        assert_eq!(write_set(4, 5, 5).collect::<Vec<_>>(), vec![4, 0, 1, 2, 3]);
    }
}
