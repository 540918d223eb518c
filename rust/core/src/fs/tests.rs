//! File calls and their fault seam against a temporary directory: removal in steps, injected
//! failures and delays, disk usage.

use super::*;

#[test]
fn files_removed_in_steps_are_gone_or_left_shorter_when_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    std::fs::write(&path, vec![1u8; 5 << 20]).unwrap();
    let stop = AtomicBool::new(true);
    // Stopped before its first cut: the file stays whole.
    assert!(!remove_file_in_steps(&path, 1 << 20, Duration::ZERO, Some(&stop)).unwrap());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 5 << 20);
    stop.store(false, Ordering::Release);
    assert!(remove_file_in_steps(&path, 1 << 20, Duration::ZERO, Some(&stop)).unwrap());
    assert!(!path.exists());
    // Gone already (a removal stopped by a crash after the unlink): not an error.
    assert!(remove_file_in_steps(&path, 1 << 20, Duration::ZERO, None).unwrap());
    // Smaller than a step: unlinked at once.
    std::fs::write(&path, b"small").unwrap();
    assert!(remove_file_in_steps(&path, 1 << 20, Duration::ZERO, None).unwrap());
    assert!(!path.exists());
}

// Faults are process-wide: one test owns the injection API so tests never race on it.
#[test]
fn injected_faults_fail_or_delay_matching_calls_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let file = create_new(&path).unwrap();
    let id = inject_fault(Fault {
        path_prefix: dir.path().to_path_buf(),
        ops: vec![Op::Sync],
        action: FaultAction::Fail(libc::ENOSPC),
        times: Some(2),
    });
    write_all(&file, &path, b"data").unwrap();
    for _ in 0..2 {
        let err = fdatasync(&file, &path).unwrap_err();
        assert!(err.to_string().contains("fdatasync"), "{err}");
        let StorageError::Io { source, .. } = err else {
            panic!("not an I/O error");
        };
        assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
    }
    fdatasync(&file, &path).unwrap(); // the fault was good for two calls
    remove_fault(id);

    let other = tempfile::tempdir().unwrap();
    let slow = inject_fault(Fault {
        path_prefix: other.path().to_path_buf(),
        ops: vec![Op::Write],
        action: FaultAction::Delay(Duration::from_millis(50)),
        times: None,
    });
    let started = std::time::Instant::now();
    write_all(&file, &path, b"x").unwrap(); // another directory: not delayed
    let p2 = other.path().join("g");
    let g = create_new(&p2).unwrap();
    write_all(&g, &p2, b"y").unwrap();
    assert!(started.elapsed() >= Duration::from_millis(50));
    clear_faults();
    assert!(!super::faults::any_injected());
    let _ = slow;
}

#[test]
fn disk_usage_reports_a_plausible_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let u = disk_usage(dir.path()).unwrap();
    assert!(u.total_bytes > 0 && u.free_bytes <= u.total_bytes);
}
