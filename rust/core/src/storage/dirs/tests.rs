//! The allocators and reviewers against their definitions (property tests), and the ledger
//! directories over real temporary directories.

use proptest::prelude::*;

use super::*;

fn state(i: usize, tier: usize, free: u64) -> DirState {
    DirState {
        path: PathBuf::from(format!("/d{i}")),
        tier,
        usage: DiskUsage {
            total_bytes: 1 << 40,
            free_bytes: free,
        },
    }
}

/// Directories sorted by tier, as configuration gives them.
fn dirs_strategy() -> impl Strategy<Value = Vec<DirState>> {
    prop::collection::vec((0usize..3, 0u64..1000), 1..8).prop_map(|mut v| {
        v.sort_by_key(|(t, _)| *t);
        v.into_iter()
            .enumerate()
            .map(|(i, (t, f))| state(i, t, f))
            .collect()
    })
}

/// The highest tier holding a directory with `need` available, if any.
fn top_fitting_tier(dirs: &[DirState], need: u64) -> Option<usize> {
    dirs.iter()
        .filter(|d| d.usage.free_bytes >= need)
        .map(|d| d.tier)
        .min()
}

/// Refuses the directories listed.
struct Refusing(Vec<PathBuf>);
impl Reviewer for Refusing {
    fn accept(&mut self, dir: &DirState) -> bool {
        !self.0.contains(&dir.path)
    }
    fn name(&self) -> &'static str {
        "Refusing"
    }
}

proptest! {
    #[test]
    fn max_free_takes_the_most_free_directory_of_the_top_tier_that_fits(
        dirs in dirs_strategy(), need in 0u64..1000,
    ) {
        let mut max_free = MaxFreeAllocator::default();
        let Some(tier) = top_fitting_tier(&dirs, need) else {
            prop_assert_eq!(max_free.choose(&dirs, need, &mut AcceptingReviewer), None);
            return Ok(());
        };
        let most = dirs.iter().filter(|d| d.tier == tier).map(|d| d.usage.free_bytes).max();
        let tied: Vec<usize> = (0..dirs.len())
            .filter(|&i| dirs[i].tier == tier && Some(dirs[i].usage.free_bytes) == most)
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..dirs.len() {
            let i = max_free.choose(&dirs, need, &mut AcceptingReviewer).expect("a directory fits");
            prop_assert_eq!(dirs[i].tier, tier);
            prop_assert_eq!(Some(dirs[i].usage.free_bytes), most);
            seen.insert(i);
        }
        // Tied directories each get their turn.
        prop_assert_eq!(seen.into_iter().collect::<Vec<_>>(), tied);
    }

    #[test]
    fn greedy_takes_the_first_directory_that_fits_top_tier_down(
        dirs in dirs_strategy(), need in 0u64..1000,
    ) {
        let chosen = GreedyAllocator.choose(&dirs, need, &mut AcceptingReviewer);
        let expected = top_fitting_tier(&dirs, need).and_then(|tier| {
            dirs.iter().position(|d| d.tier == tier && d.usage.free_bytes >= need)
        });
        prop_assert_eq!(chosen, expected);
    }

    #[test]
    fn round_robin_cycles_through_the_fitting_directories_of_the_top_tier(
        dirs in dirs_strategy(), need in 0u64..1000,
    ) {
        let mut rr = RoundRobinAllocator::default();
        let Some(tier) = top_fitting_tier(&dirs, need) else {
            prop_assert_eq!(rr.choose(&dirs, need, &mut AcceptingReviewer), None);
            return Ok(());
        };
        let fitting: Vec<usize> = (0..dirs.len())
            .filter(|&i| dirs[i].tier == tier && dirs[i].usage.free_bytes >= need)
            .collect();
        let picks: Vec<usize> = (0..2 * fitting.len())
            .map(|_| rr.choose(&dirs, need, &mut AcceptingReviewer).expect("fits"))
            .collect();
        // Each fitting directory once per round, in the order configured, round after round.
        let expected: Vec<usize> = fitting.iter().chain(fitting.iter()).copied().collect();
        prop_assert_eq!(picks, expected);
    }

    #[test]
    fn no_allocator_takes_a_directory_the_reviewer_refuses(
        dirs in dirs_strategy(), need in 0u64..1000, refused in prop::collection::vec(any::<bool>(), 8),
    ) {
        let refused_paths: Vec<PathBuf> = dirs
            .iter()
            .enumerate()
            .filter(|(i, _)| refused[*i])
            .map(|(_, d)| d.path.clone())
            .collect();
        let allowed: Vec<DirState> = dirs
            .iter()
            .enumerate()
            .filter(|(i, _)| !refused[*i])
            .map(|(_, d)| d.clone())
            .collect();
        let mut allocators: Vec<Box<dyn Allocator>> = vec![
            Box::<MaxFreeAllocator>::default(),
            Box::new(GreedyAllocator),
            Box::<RoundRobinAllocator>::default(),
        ];
        for a in &mut allocators {
            let chosen = a.choose(&dirs, need, &mut Refusing(refused_paths.clone()));
            // As if the refused directories were not there.
            prop_assert_eq!(chosen.is_some(), top_fitting_tier(&allowed, need).is_some(), "{}", a.name());
            if let Some(i) = chosen {
                prop_assert!(!refused[i]);
                prop_assert_eq!(Some(dirs[i].tier), top_fitting_tier(&allowed, need));
            }
        }
    }

    #[test]
    fn the_buffer_reviewer_accepts_by_its_linear_probability(
        hard in 0u64..1000, span in 0u64..1000, free in 0u64..3000,
    ) {
        let soft = hard + span;
        let r = ProbabilisticBufferReviewer::with_seed(soft, hard, 7);
        let p = r.probability(free);
        if free > soft {
            prop_assert_eq!(p, 1.0);
        } else if free <= hard {
            prop_assert_eq!(p, 0.0);
        } else {
            let expected = (free - hard) as f64 / (soft - hard) as f64;
            prop_assert!((p - expected).abs() < 1e-12);
        }
        // More free space is never less likely to be accepted.
        prop_assert!(r.probability(free + 1) >= p);
    }
}

#[test]
fn the_buffer_reviewer_accepts_about_as_often_as_its_probability() {
    let mut r = ProbabilisticBufferReviewer::with_seed(1000, 0, 42);
    for free in [100u64, 250, 500, 900] {
        let dir = state(0, 0, free);
        let n = 20_000;
        let accepted = (0..n).filter(|_| r.accept(&dir)).count();
        let rate = accepted as f64 / n as f64;
        let p = free as f64 / 1000.0;
        assert!((rate - p).abs() < 0.02, "free {free}: rate {rate}, p {p}");
    }
    // A soft limit under the hard one is raised to it: a plain cut.
    let cut = ProbabilisticBufferReviewer::with_seed(10, 100, 1);
    assert_eq!(cut.probability(100), 0.0);
    assert_eq!(cut.probability(101), 1.0);
}

#[test]
fn round_robin_cycles_through_the_directories() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let dirs = LedgerDirs::new(
        vec![a.path().into(), b.path().into()],
        Box::<RoundRobinAllocator>::default(),
    );
    let picks: Vec<PathBuf> = (0..4).map(|_| dirs.choose_for_new_log().unwrap()).collect();
    assert_eq!(picks[0], a.path());
    assert_eq!(picks[1], b.path());
    assert_eq!(picks[2], a.path());
    std::fs::write(b.path().join("1.log"), b"x").unwrap();
    assert_eq!(dirs.locate("1.log"), Some(b.path()));
    assert_eq!(dirs.locate("2.log"), None);
}

#[test]
fn full_directories_take_no_new_log_while_another_can() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let dirs = LedgerDirs::new(
        vec![a.path().into(), b.path().into()],
        Box::<RoundRobinAllocator>::default(),
    );
    dirs.set_full(&[true, false]);
    for _ in 0..4 {
        assert_eq!(dirs.choose_for_new_log().unwrap(), b.path());
    }
    // All full: still a directory (the bookie is read-only; recovery adds may come).
    dirs.set_full(&[true, true]);
    let p = dirs.choose_for_new_log().unwrap();
    assert!(p == a.path() || p == b.path());
    dirs.set_full(&[]);
    assert_eq!(dirs.full_flags(), vec![false, false]);
}

#[test]
fn quotas_send_new_logs_down_a_tier_once_the_top_one_is_used_up() {
    let top = tempfile::tempdir().unwrap();
    let low = tempfile::tempdir().unwrap();
    let cfg = DirsConfig {
        tiers: vec![0, 1],
        quotas: vec![Some(10_000), None],
        allocator: "GreedyAllocator".into(),
        ..Default::default()
    };
    let dirs =
        LedgerDirs::configured(vec![top.path().into(), low.path().into()], &cfg, 4000).unwrap();
    let states = dirs.states().unwrap();
    assert_eq!(states[0].usage.total_bytes, 10_000);
    assert_eq!(states[0].tier, 0);
    assert_eq!(dirs.choose_for_new_log().unwrap(), top.path());
    std::fs::write(top.path().join("1.log"), vec![0u8; 7000]).unwrap();
    assert_eq!(dirs.states().unwrap()[0].usage.free_bytes, 3000);
    assert_eq!(dirs.choose_for_new_log().unwrap(), low.path());
    assert!(LedgerDirs::configured(
        vec![top.path().into()],
        &DirsConfig {
            allocator: "NoSuchAllocator".into(),
            ..Default::default()
        },
        0
    )
    .is_err());
}
