//! The process-wide switch for histograms and timings (BookKeeper's `enableStatistics`) and
//! the clock reads timings make: none at all with metrics off, one shared by a batch of
//! completions with them on. It records nothing itself.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
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
