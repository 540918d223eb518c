//! Reading entry logs: one positional read per run of back-to-back records (taking the records
//! between wanted ones along when that is cheaper than a second read), each record checked
//! (checksum, ledger, entry) before its data is returned; read-ahead hints to the kernel. It
//! never writes a log.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::log_file::{LogFile, DIRECT_READ_MIN_BYTES};
use super::{log_name, EntryLogger, Location};
use crate::error::{Result, StorageError};
use crate::fs;
use crate::record::{be_u64, verify_record, RECORD_HEADER_LEN};

/// One positional read covers at most this many bytes of back-to-back records.
const MAX_READ_BYTES: u64 = 4 << 20;
/// Bytes between two wanted records that one read may take along rather than split in two.
const MAX_SKIPPED_BYTES: u64 = 4 << 10;
/// The same where the log reads directly (`entryLogDirectReads`). Skipped bytes read directly
/// cost the device's time and no CPU, and a run of wanted records with the records between them
/// is large enough to be read directly, where records read one by one (a strided read takes
/// every other record of a bookie holding two write sets of a striped ledger) would each go
/// through the page cache. Measured: it cut the source bookies' CPU while healing a lost bookie
/// (docs/performance.md, "Design figures behind the code").
const MAX_SKIPPED_BYTES_DIRECT: u64 = 256 << 10;

impl EntryLogger {
    pub(super) fn file(&self, id: u32) -> Result<Arc<LogFile>> {
        if let Some(f) = self.files.read().get(&id) {
            return Ok(f.clone());
        }
        // Opened under the write lock, so a move cannot switch the log's location between
        // looking it up and opening it.
        let mut files = self.files.write();
        if let Some(f) = files.get(&id) {
            return Ok(f.clone());
        }
        let name = log_name(id);
        let place = self.logs.read().get(&id).map(|p| (p.dir, p.meta.clone()));
        let Some((dir, path, meta)) =
            place.and_then(|(d, m)| self.dirs.path_of(d).map(|p| (d, p.join(&name), m)))
        else {
            return Err(StorageError::Corruption(format!(
                "entry log {name} is missing from every ledger directory"
            )));
        };
        let f = Arc::new(LogFile::new(
            path.clone(),
            fs::open_read(&path)?,
            self.dirs.tier_of(dir),
            meta,
            self.direct_reads,
        ));
        files.insert(id, f.clone());
        Ok(f)
    }

    /// Counts a read of `log` for the annotator and, for a log below the top tier with
    /// `tieredStoragePromoteOnRead`, asks for its promotion. Atomics only.
    fn touch(&self, log: &LogFile) {
        self.dirs.annotator().touch(&log.meta.heat);
        if log.tier > 0 && self.dirs.policy().promote_on_read {
            log.meta.wants_promotion.store(true, Ordering::Relaxed);
        }
    }

    /// Reads one entry's data, checking the record's checksum and ids.
    pub fn read(&self, ledger: u64, entry: u64, at: Location) -> Result<Bytes> {
        let (mut out, err) = self.read_run(ledger, &[(entry, at)]);
        match err {
            Some(e) => Err(e),
            None => out.pop().ok_or(StorageError::NoEntry { ledger, entry }),
        }
    }

    /// Reads entries in order, with one positional read per run of records that lie back to
    /// back in one log (the common case for a ledger written by one writer), or close enough
    /// that reading the bytes between costs less than another read (a strided batch read skips
    /// the records of other write-set positions). Returns the entries read before the first
    /// failure, and that failure.
    pub fn read_run(
        &self,
        ledger: u64,
        items: &[(u64, Location)],
    ) -> (Vec<Bytes>, Option<StorageError>) {
        let mut out = Vec::with_capacity(items.len());
        let mut i = 0;
        while i < items.len() {
            let first = items[i].1;
            // Skipped bytes are worth reading along only where the run will be read directly:
            // through the page cache they would be copied out for nothing.
            let max_skipped = if i + 1 < items.len() && self.reads_directly(first.log_id()) {
                MAX_SKIPPED_BYTES_DIRECT
            } else {
                MAX_SKIPPED_BYTES
            };
            let mut end = first.offset() + (RECORD_HEADER_LEN as u64) + first.len as u64;
            let mut j = i + 1;
            while j < items.len()
                && items[j].1.log_id() == first.log_id()
                && items[j].1.offset() >= end
                && items[j].1.offset() - end <= max_skipped
                && end - first.offset() < MAX_READ_BYTES
            {
                end = items[j].1.offset() + (RECORD_HEADER_LEN as u64) + items[j].1.len as u64;
                j += 1;
            }
            let buf = match self.pread(first.log_id(), first.offset(), end - first.offset()) {
                Ok(b) => b,
                Err(e) => return (out, Some(e)),
            };
            for (entry, at) in &items[i..j] {
                let from = (at.offset() - first.offset()) as usize;
                let to = from + RECORD_HEADER_LEN + at.len as usize;
                match check_record(&buf, from, to, ledger, *entry, *at) {
                    Ok(data) => out.push(data),
                    Err(e) => return (out, Some(e)),
                }
            }
            i = j;
        }
        (out, None)
    }

    /// Asks the kernel to read `len` bytes of log `log_id` at `offset` ahead, asynchronously:
    /// a sequential scan's next runs are on their way while this one is served.
    /// A run large enough to be read directly is not hinted: the page cache would only read it
    /// twice.
    pub fn prefetch(&self, log_id: u32, offset: u64, len: u64) {
        if let Ok(log) = self.file(log_id) {
            if log.direct_for(len).is_none() {
                fs::advise_will_need(&log.file, offset, len);
            }
        }
    }

    /// Whether large reads of log `log_id` go around the page cache (direct reads on, and the
    /// file system takes them). A log that cannot be opened says no: the read reports it.
    pub fn reads_directly(&self, log_id: u32) -> bool {
        self.direct_reads
            && self
                .file(log_id)
                .is_ok_and(|log| log.direct_for(DIRECT_READ_MIN_BYTES).is_some())
    }

    fn pread(&self, log_id: u32, offset: u64, len: u64) -> Result<Bytes> {
        let log = self.file(log_id)?;
        self.touch(&log);
        // `len` comes from index locations of back-to-back records, capped near
        // MAX_READ_BYTES by `read_run` (one record may exceed it alone, up to the frame limit).
        if let Some(direct) = log.direct_for(len) {
            if let Some(bytes) = fs::read_direct_at(direct, &log.path, offset, len as usize)? {
                return Ok(bytes);
            }
            // Refused at read time (an alignment the device will not take): the page cache
            // serves this read; the next large one tries again.
        }
        let mut buf = vec![0u8; len as usize];
        fs::read_exact_at(&log.file, &log.path, &mut buf, offset)?;
        Ok(Bytes::from(buf))
    }
}

/// Verifies the record at `buf[from..to]` and returns its entry data without copying.
fn check_record(
    buf: &Bytes,
    from: usize,
    to: usize,
    ledger: u64,
    entry: u64,
    at: Location,
) -> Result<Bytes> {
    let what = || {
        format!(
            "entry {entry} of ledger {ledger} at {}:{}",
            log_name(at.log_id()),
            at.offset()
        )
    };
    let body = verify_record(&buf[from..to], what)?;
    if be_u64(&body[0..8]) != ledger || be_u64(&body[8..16]) != entry {
        return Err(StorageError::Corruption(format!(
            "{} holds another entry",
            what()
        )));
    }
    Ok(buf.slice(from + RECORD_HEADER_LEN + 16..to))
}
