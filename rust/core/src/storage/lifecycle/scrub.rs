//! The scrubber: reads every entry log back in the background, paced to a byte rate
//! (`scrubRateBytesPerSecond`), and checks each entry the index points at: the record's framing
//! and CRC32C, the ledger and entry ids in the record, and the client's digest (CRC32C or
//! CRC32, through [`DigestManager`]: no key needed). It counts what it checks and reports each
//! damaged entry (ledger, entry, check, log, offset) once, for the bookie to repair from another
//! replica; until then a read of an entry whose digest failed answers an error, never its bytes.
//! It decides nothing about repair and never writes a log.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::digest::{DigestManager, DigestType, ENTRY_HEADER_LEN};
use crate::error::{IoContext, Result, StorageError};
use crate::fs;
use crate::record::{be_u64, verify_record, RECORD_HEADER_LEN};
use crate::storage::entrylog::{log_name, Location};
use crate::storage::index::segment::IndexEntry;
use crate::storage::stats::StorageStats;
use crate::storage::stores::Stores;

/// The most bytes one read of a scrub covers (less when the rate is low, so a paced scrub
/// never reads far ahead of its budget).
const MAX_CHUNK_BYTES: u64 = 4 << 20;
/// Reads of the log asked of the kernel ahead of the one being checked.
const READ_AHEAD_CHUNKS: u64 = 2;
/// Logs whose entries one pass over the index lists: a ledger spread over many logs is read
/// from the index once a batch, not once a log, and the listed entries of at most this many
/// logs are in memory at once.
const LOGS_PER_INDEX_PASS: usize = 16;
/// Index entries looked up per page while listing a log's entries.
const INDEX_PAGE: usize = 1 << 16;
/// Findings waiting for the bookie to repair them; past it the newest are dropped (counted):
/// the next run finds them again.
pub(crate) const MAX_PENDING_FINDINGS: usize = 4096;
/// Damaged copies remembered to be logged once each; past it the memory starts afresh.
const MAX_LOGGED: usize = 65536;
/// The longest a paced scrub sleeps at once, so a close never waits long for it.
const MAX_PACE_SLEEP: Duration = Duration::from_millis(100);

/// Which check a damaged entry failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScrubCheck {
    /// The record's framing or CRC32C (bit flips in the stored bytes).
    Record,
    /// The record is whole but names another ledger or entry than the index says.
    Ids,
    /// The index points past the end of the log, or at a log that is gone (a truncated file).
    Missing,
    /// The record is whole but the entry's own header (the client's packaging, which its
    /// digest covers) names another ledger or entry, or is too short to be one.
    Digest,
}

impl ScrubCheck {
    /// The name used in logs, metrics and the admin API.
    pub fn name(self) -> &'static str {
        match self {
            ScrubCheck::Record => "record_crc",
            ScrubCheck::Ids => "record_ids",
            ScrubCheck::Missing => "missing",
            ScrubCheck::Digest => "digest",
        }
    }
}

/// One damaged entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubFinding {
    pub ledger: u64,
    pub entry: u64,
    pub check: ScrubCheck,
    /// The entry log's file name and the record's offset in it.
    pub log: String,
    pub offset: u64,
}

/// What one scrub run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScrubReport {
    pub logs_scrubbed: u64,
    /// Logs another job held (a move, a compaction): left for the next run.
    pub logs_skipped: u64,
    pub bytes_scrubbed: u64,
    pub entries_verified: u64,
    /// Entries whose record checked but whose digest is neither CRC32C nor CRC32 (MAC and
    /// DUMMY ledgers: the bookie holds no key for a MAC).
    pub digest_unverified: u64,
    pub corrupt_entries: u64,
    /// Whether the run went through every log (not stopped by a close).
    pub complete: bool,
    /// The damaged entries found (at most `MAX_PENDING_FINDINGS`).
    pub findings: Vec<ScrubFinding>,
}

/// What the scrubber shares with the rest of the storage: the findings for the bookie, the
/// entries reads must refuse, a run's progress.
#[derive(Default)]
pub struct ScrubState {
    pending: Mutex<VecDeque<ScrubFinding>>,
    /// Entries whose stored bytes are whole as records but fail their digest: reads answer an
    /// error for them until the bookie repaired them (a record that fails its CRC fails every
    /// read by itself).
    refused: RwLock<HashSet<(u64, u64)>>,
    refused_count: AtomicU64,
    logged: Mutex<HashSet<(u64, u64, u64)>>,
    /// The current (or last) run: bytes of the logs it covers, and bytes read so far.
    pub(crate) run_total_bytes: AtomicU64,
    pub(crate) run_done_bytes: AtomicU64,
    /// Findings dropped because `pending` was full.
    pub(crate) dropped_findings: AtomicU64,
    /// One run at a time.
    running: Mutex<()>,
    last: Mutex<Option<ScrubReport>>,
}

impl ScrubState {
    /// Whether a read of this entry must fail: the scrubber found its digest bad.
    pub fn refuses(&self, ledger: u64, entry: u64) -> bool {
        self.refused_count.load(Ordering::Acquire) > 0
            && self.refused.read().contains(&(ledger, entry))
    }

    /// The findings not yet taken by the bookie, oldest first (taking them).
    pub fn take_findings(&self) -> Vec<ScrubFinding> {
        self.pending.lock().drain(..).collect()
    }

    /// The bookie rewrote this entry from another replica: reads may serve it again.
    pub fn repaired(&self, ledger: u64, entry: u64) {
        let mut refused = self.refused.write();
        if refused.remove(&(ledger, entry)) {
            self.refused_count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// How many entries reads refuse now.
    pub fn refused_entries(&self) -> u64 {
        self.refused_count.load(Ordering::Acquire)
    }

    /// The last finished run.
    pub fn last(&self) -> Option<ScrubReport> {
        self.last.lock().clone()
    }

    fn record(&self, finding: &ScrubFinding, at: Location) -> bool {
        if finding.check == ScrubCheck::Digest {
            let mut refused = self.refused.write();
            if refused.insert((finding.ledger, finding.entry)) {
                self.refused_count.fetch_add(1, Ordering::AcqRel);
            }
        }
        let fresh = {
            // Keyed by the damaged copy's location: a repaired entry's old copy, found again
            // until the index points at the new one, is not logged twice.
            let mut logged = self.logged.lock();
            if logged.len() >= MAX_LOGGED {
                logged.clear(); // a damaged copy may then be logged once more
            }
            logged.insert((finding.ledger, finding.entry, at.loc))
        };
        if fresh {
            log::error!(
                "scrub: entry {} of ledger {} is damaged ({}) at {}:{}; to be repaired from \
                 another replica",
                finding.entry,
                finding.ledger,
                finding.check.name(),
                finding.log,
                finding.offset
            );
        }
        let mut pending = self.pending.lock();
        if pending.len() < MAX_PENDING_FINDINGS {
            if !pending.contains(finding) {
                pending.push_back(finding.clone());
            }
        } else {
            self.dropped_findings.fetch_add(1, Ordering::Relaxed);
        }
        fresh
    }
}

/// What a scrub run works with.
pub(super) struct Scrubber<'a> {
    pub(super) stores: &'a Stores,
    pub(super) stats: &'a StorageStats,
    pub(super) state: &'a ScrubState,
    /// Bytes per second; 0: unpaced.
    pub(super) rate_bytes: u64,
    pub(super) stop: &'a dyn Fn() -> bool,
}

/// The pacing of one run: a token bucket filled at the rate and holding at most `burst`
/// bytes, so that over any window of `w` seconds a run reads at most `rate * w + burst` bytes
/// (plus one record larger than the burst), and a run that fell behind never catches up in a
/// rush.
struct Pace {
    rate_bytes: u64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Pace {
    fn new(rate_bytes: u64, burst: u64) -> Pace {
        Pace {
            rate_bytes,
            burst: burst as f64,
            tokens: burst as f64,
            at: Instant::now(),
        }
    }

    /// Waits until `more` bytes may be read at the rate; false if the run must stop.
    fn take(&mut self, more: u64, stop: &dyn Fn() -> bool) -> bool {
        if self.rate_bytes == 0 {
            return !stop();
        }
        // A read larger than the bucket waits for a full bucket and leaves it in debt.
        let need = (more as f64).min(self.burst);
        loop {
            if stop() {
                return false;
            }
            let now = Instant::now();
            let earned = now.duration_since(self.at).as_secs_f64() * self.rate_bytes as f64;
            self.tokens = (self.tokens + earned).min(self.burst);
            self.at = now;
            if self.tokens >= need {
                self.tokens -= more as f64;
                return true;
            }
            let wait = Duration::from_secs_f64((need - self.tokens) / self.rate_bytes as f64);
            std::thread::sleep(wait.min(MAX_PACE_SLEEP));
        }
    }
}

impl Scrubber<'_> {
    /// One run over every log. The log being written is read too: an entry is indexed only once
    /// its bytes are in the file, and only indexed entries are checked.
    pub(super) fn run(&self) -> Result<ScrubReport> {
        let _one_at_a_time = self.state.running.lock();
        let entrylog = &self.stores.entrylog;
        let logs: Vec<u32> = entrylog
            .placed_logs()
            .into_iter()
            .map(|(id, _, _)| id)
            .collect();
        let total: u64 = logs.iter().map(|id| entrylog.log_size(*id)).sum();
        self.state.run_total_bytes.store(total, Ordering::Relaxed);
        self.state.run_done_bytes.store(0, Ordering::Relaxed);
        let mut report = ScrubReport::default();
        let mut pace = Pace::new(self.rate_bytes, self.chunk_limit());
        let mut stopped = false;
        'batches: for batch in logs.chunks(LOGS_PER_INDEX_PASS) {
            let mut listed = self.indexed_entries(batch)?;
            for id in batch {
                if (self.stop)() {
                    stopped = true;
                    break 'batches;
                }
                // Held by a move, a compaction or a garbage collection: the next run takes it.
                let Some(_pin) = entrylog.pin(*id) else {
                    report.logs_skipped += 1;
                    continue;
                };
                // Removed since it was listed (its live entries now live elsewhere).
                let Some(path) = entrylog.log_path(*id) else {
                    continue;
                };
                let entries = listed.remove(id).unwrap_or_default();
                if !self.scrub_log(*id, &path, &entries, &mut pace, &mut report)? {
                    stopped = true;
                    break 'batches;
                }
                report.logs_scrubbed += 1;
            }
        }
        report.complete = !stopped;
        self.stats.scrub_runs.inc();
        log::info!(
            "scrub: {} logs, {} bytes, {} entries verified, {} corrupt{}",
            report.logs_scrubbed,
            report.bytes_scrubbed,
            report.entries_verified,
            report.corrupt_entries,
            if stopped { " (stopped early)" } else { "" }
        );
        *self.state.last.lock() = Some(report.clone());
        Ok(report)
    }

    /// The most bytes one read covers: a quarter of a second at the rate (4 KiB to 4 MiB).
    fn chunk_limit(&self) -> u64 {
        if self.rate_bytes == 0 {
            MAX_CHUNK_BYTES
        } else {
            (self.rate_bytes / 4).clamp(4096, MAX_CHUNK_BYTES)
        }
    }

    /// The entries the index places in each of `logs`, by offset: one pass over the index for
    /// the ledgers of their ledgers maps, or over every ledger when a log is still written or
    /// its map cannot be read (a truncated log loses its seal).
    fn indexed_entries(&self, logs: &[u32]) -> Result<HashMap<u32, Vec<IndexEntry>>> {
        let stores = self.stores;
        let mut ledgers: HashSet<u64> = HashSet::new();
        for id in logs {
            let sealed_map = if stores.entrylog.is_unsealed(*id) {
                None
            } else {
                stores
                    .entrylog
                    .log_path(*id)
                    .and_then(|p| crate::storage::entrylog::read_ledgers_map(&p).ok())
            };
            match sealed_map {
                Some(map) if !map.is_empty() => ledgers.extend(map.keys().copied()),
                _ => {
                    ledgers = stores.list_ledgers().into_iter().collect();
                    break;
                }
            }
        }
        let mut out: HashMap<u32, Vec<IndexEntry>> =
            logs.iter().map(|id| (*id, Vec::new())).collect();
        for ledger in ledgers {
            let Ok(since) = stores.ledger(ledger, |st| st.since_seq) else {
                continue; // deleted: its entries are garbage, not damage
            };
            let mut from = 0u64;
            loop {
                let page = stores
                    .segments
                    .scan_ledger(ledger, from, INDEX_PAGE, since)?;
                let Some(last) = page.last().map(|e| e.entry) else {
                    break;
                };
                for e in &page {
                    if let Some(v) = out.get_mut(&e.at.log_id()) {
                        v.push(*e);
                    }
                }
                if page.len() < INDEX_PAGE {
                    break;
                }
                from = last + 1;
            }
        }
        for v in out.values_mut() {
            v.sort_unstable_by_key(|e| e.at.offset());
        }
        Ok(out)
    }

    /// Scrubs log `id` (at `path`) for its indexed `entries`; false if the run must stop.
    fn scrub_log(
        &self,
        id: u32,
        path: &Path,
        entries: &[IndexEntry],
        pace: &mut Pace,
        report: &mut ScrubReport,
    ) -> Result<bool> {
        let log = log_name(id);
        let file = match fs::open_read(path) {
            Ok(file) => file,
            Err(StorageError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {
                // Listed, held, and gone from its directory: every entry in it is lost here.
                for e in entries {
                    self.damaged(e, ScrubCheck::Missing, &log, report);
                }
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        let chunk_limit = self.chunk_limit();
        let mut digests = Digests::default();
        let mut i = 0;
        while i < entries.len() {
            let (start, end, j) = plan_run(&entries[i..], chunk_limit);
            // Paid for before it is read: the rate bounds the reads, not just their checks.
            if !pace.take(end - start, self.stop) {
                return Ok(false);
            }
            // The next reads are on their way while this one is checked (and, paced, while the
            // scrub waits): a whole read ahead, asked of the kernel, costs no memory of ours.
            fs::advise_will_need(&file, end, READ_AHEAD_CHUNKS * chunk_limit);
            let buf = read_upto(&file, &log, start, end)?;
            for e in &entries[i..i + j] {
                self.check_entry(&buf, start, e, (&log, &mut digests), report);
            }
            report.bytes_scrubbed += buf.len() as u64;
            self.stats.scrub_bytes.add(buf.len() as u64);
            self.state
                .run_done_bytes
                .fetch_add(buf.len() as u64, Ordering::Relaxed);
            i += j;
        }
        Ok(true)
    }

    /// Checks one entry's record in `buf` (read from file offset `start`).
    fn check_entry(
        &self,
        buf: &Bytes,
        start: u64,
        e: &IndexEntry,
        (log, digests): (&str, &mut Digests),
        report: &mut ScrubReport,
    ) {
        let from = (e.at.offset() - start) as usize;
        let to = from + RECORD_HEADER_LEN + e.at.len as usize;
        if to > buf.len() {
            self.damaged(e, ScrubCheck::Missing, log, report);
            return;
        }
        let body = match verify_record(&buf[from..to], String::new) {
            Ok(body) => body,
            Err(_) => {
                self.damaged(e, ScrubCheck::Record, log, report);
                return;
            }
        };
        if body.len() < 16 || be_u64(&body[0..8]) != e.ledger || be_u64(&body[8..16]) != e.entry {
            self.damaged(e, ScrubCheck::Ids, log, report);
            return;
        }
        let data = buf.slice(from + RECORD_HEADER_LEN + 16..to);
        match digests.check(e.ledger, e.entry, data) {
            DigestVerdict::Verified => {}
            DigestVerdict::Unverified => report.digest_unverified += 1,
            DigestVerdict::Damaged => {
                self.damaged(e, ScrubCheck::Digest, log, report);
                return;
            }
        }
        report.entries_verified += 1;
        self.stats.scrub_entries.inc();
    }

    fn damaged(&self, e: &IndexEntry, check: ScrubCheck, log: &str, report: &mut ScrubReport) {
        if self.stores.cache.get(e.ledger, e.entry).is_some() {
            // A newer copy (a repair, a client's re-add) waits in the write cache: the next
            // flush indexes it in place of this one, and reads already get it.
            return;
        }
        let finding = ScrubFinding {
            ledger: e.ledger,
            entry: e.entry,
            check,
            log: log.to_string(),
            offset: e.at.offset(),
        };
        self.state.record(&finding, e.at);
        self.stats.scrub_corrupt.inc();
        report.corrupt_entries += 1;
        if report.findings.len() < MAX_PENDING_FINDINGS {
            report.findings.push(finding);
        }
    }
}

/// The records of `entries` from the first on that lie within `limit` bytes of it (always the
/// first): (file offset, end, how many entries).
fn plan_run(entries: &[IndexEntry], limit: u64) -> (u64, u64, usize) {
    let record_end = |e: &IndexEntry| e.at.offset() + RECORD_HEADER_LEN as u64 + e.at.len as u64;
    let start = entries[0].at.offset();
    let mut end = record_end(&entries[0]);
    let mut j = 1;
    while j < entries.len() && record_end(&entries[j]) - start <= limit {
        end = end.max(record_end(&entries[j]));
        j += 1;
    }
    (start, end, j)
}

/// The bytes of `file` from `start` to `end`, fewer where the file ends first (the records past
/// it are missing: a truncated log).
fn read_upto(file: &File, log: &str, start: u64, end: u64) -> Result<Bytes> {
    let mut buf = vec![0u8; (end - start) as usize];
    let mut got = 0usize;
    while got < buf.len() {
        let n = file
            .read_at(&mut buf[got..], start + got as u64)
            .ctx(|| format!("scrub: reading entry log {log}"))?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    Ok(Bytes::from(buf))
}

/// What the client digest of a stored entry says.
#[derive(Debug, PartialEq, Eq)]
enum DigestVerdict {
    /// CRC32C or CRC32 matches, with the entry's own ledger and entry ids.
    Verified,
    /// Neither matches and the header names this entry: a MAC or DUMMY ledger, whose digest
    /// the bookie cannot check (the MAC key derives from the password, which it never holds).
    Unverified,
    /// The header names another entry, or is too short to be an entry at all.
    Damaged,
}

/// The keyless digest managers of the ledger last checked: entries come sorted by ledger
/// within a log, and making a manager derives a key (a SHA-1), too dear for every entry.
#[derive(Default)]
struct Digests {
    ledger: Option<u64>,
    managers: Vec<DigestManager>,
}

impl Digests {
    /// Checks the client digest of `data` (a packaged entry: header, digest, payload) with the
    /// digest types that need no key, reusing the client's [`DigestManager`].
    fn check(&mut self, ledger: u64, entry: u64, data: Bytes) -> DigestVerdict {
        if data.len() < ENTRY_HEADER_LEN {
            return DigestVerdict::Damaged;
        }
        let header_ledger = be_u64(&data[0..8]);
        let header_entry = be_u64(&data[8..16]);
        if header_ledger != ledger || header_entry != entry {
            return DigestVerdict::Damaged;
        }
        if self.ledger != Some(ledger) {
            self.ledger = Some(ledger);
            self.managers = [DigestType::Crc32c, DigestType::Crc32]
                .into_iter()
                .map(|kind| DigestManager::new(ledger as i64, b"", kind))
                .collect();
        }
        for dm in &self.managers {
            if dm.verify(&data, Some(entry as i64)).is_ok() {
                return DigestVerdict::Verified;
            }
        }
        DigestVerdict::Unverified
    }
}
