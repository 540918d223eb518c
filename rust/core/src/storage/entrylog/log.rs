//! One entry log file: creation with its header, buffered appends, sealing (the ledgers map
//! appended and its offset written into the header), and reading the map back (or rebuilding it
//! by scanning an unsealed log). It never chooses a directory.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ledgers_map::{decode_ledgers_map, encode_ledgers_map, LedgersMap};
use super::location::log_name;
use crate::aligned::{AlignedBuf, DIRECT_ALIGN};
use crate::error::{IoContext, Result};
use crate::fs::{self, DirectWrite};
use crate::record::{
    append_record, be_u32, be_u64, check_file_header, file_header, verify_record, RecordReader,
    RecordSink, ScanEnd, FILE_HEADER_LEN, RECORD_HEADER_LEN,
};

const LOG_MAGIC: &[u8; 8] = b"PBKXELOG";
const LOG_VERSION: u32 = 1;
/// The header's spare field holds the ledgers-map offset once the log is sealed.
const MAP_OFFSET_AT: u64 = 24;
/// Ledger id of the ledgers-map record; real ledger ids are non-negative i64.
const MAP_MARKER: u64 = u64::MAX;
/// Ledger id of padding records (direct I/O fills partial blocks with them).
const PAD_MARKER: u64 = u64::MAX - 1;
/// The largest ledgers map read from a seal (a million ledgers); beyond it the log is scanned.
const MAX_MAP_READ: u64 = 16 << 20;

/// The log being appended to.
pub(super) struct ActiveLog {
    pub(super) id: u32,
    pub(super) path: PathBuf,
    file: File,
    /// The same file opened with `O_DIRECT` (`dbStorage_directIOEntryLogger`), when the file
    /// system does direct I/O: whole blocks of `buf` go from memory to the device without a
    /// copy into the page cache. See [`ActiveLog::publish`] for why blocks are never rewritten.
    direct: Option<File>,
    /// A second descriptor of the same file, so a checkpoint can fdatasync it without holding
    /// the lock that appends need (a sync under the lock would stall acknowledgements).
    pub(super) sync_handle: Arc<File>,
    /// Logical end: bytes written plus bytes still in `buf`.
    pub(super) end: u64,
    /// Where the first record goes: after the header (padded to a block in direct mode).
    records_from: u64,
    /// Bytes not yet written; they belong at `end - buf.len()`, a block boundary in direct mode.
    pub(super) buf: AlignedBuf,
    /// `writeBufferSizeBytes`: `buf` is written once it holds this many bytes (at least
    /// [`DIRECT_WRITE_BYTES`] in direct mode, see [`ActiveLog::write_at`]).
    write_buffer: usize,
    pub(super) ledgers: LedgersMap,
    /// Where the written bytes not yet handed to writeback start (see [`WRITEBACK_BYTES`]).
    writeback_from: u64,
}

/// Written bytes of a log handed to the kernel's writeback at once, without waiting: the data
/// goes to disk at a steady pace instead of piling up as dirty pages until the checkpoint's
/// fdatasync writes them in one burst that stalls the journal's syncs behind it. Small, so that
/// a journal sync never queues behind much of it (measured: larger pieces raised small adds'
/// p99, see docs/performance.md, "Design figures behind the code").
const WRITEBACK_BYTES: u64 = 1 << 20;

/// Direct writes are made at least this large: each waits for the device, so small ones would
/// cap the checkpoint's speed at the device's latency.
const DIRECT_WRITE_BYTES: usize = 1 << 20;

impl ActiveLog {
    /// Creates log `id` in `dir` (synced, header included); returns it and a read handle. With
    /// `direct_io`, the header is padded to a whole block and later writes bypass the page
    /// cache (when the file system allows it).
    pub(super) fn create(
        dir: &Path,
        id: u32,
        write_buffer: usize,
        direct_io: bool,
    ) -> Result<(Self, File)> {
        let path = dir.join(log_name(id));
        let file = fs::create_new(&path)?;
        match Self::init(dir, id, path.clone(), file, write_buffer, direct_io) {
            Ok(made) => Ok(made),
            Err(e) => {
                // A log that cannot get its header (a full disk) is removed, not left behind
                // empty: every failed flush would otherwise add one.
                if let Err(gone) = fs::remove_file(&path) {
                    ::log::warn!("{gone}");
                }
                Err(e)
            }
        }
    }

    /// Writes the new log's header and opens its other descriptors.
    fn init(
        dir: &Path,
        id: u32,
        path: PathBuf,
        file: File,
        write_buffer: usize,
        direct_io: bool,
    ) -> Result<(Self, File)> {
        let direct = if direct_io {
            let direct = fs::open_direct_write(&path)?;
            if direct.is_none() {
                ::log::warn!(
                    "entry log {}: the file system refuses direct I/O; this log is written \
                     through the page cache",
                    path.display()
                );
            }
            direct
        } else {
            None
        };
        let mut head = file_header(LOG_MAGIC, LOG_VERSION, id as u64).to_vec();
        if direct.is_some() {
            append_padding(&mut head, DIRECT_ALIGN - FILE_HEADER_LEN);
        }
        fs::write_all(&file, &path, &head)?;
        fs::fsync(&file, &path)?;
        fs::sync_dir(dir)?;
        let reader = fs::open_read(&path)?;
        let sync_handle = Arc::new(
            file.try_clone()
                .ctx(|| format!("duplicating {}", path.display()))?,
        );
        let end = head.len() as u64;
        let mut log = ActiveLog {
            id,
            path,
            file,
            direct,
            sync_handle,
            end,
            records_from: end,
            buf: AlignedBuf::with_capacity(0),
            write_buffer,
            ledgers: LedgersMap::new(),
            writeback_from: end,
        };
        // Room for a full write and the record that crosses the mark, so appends rarely grow it.
        log.buf.reserve(log.write_at() + (64 << 10));
        Ok((log, reader))
    }

    /// Whether this log writes with direct I/O (it falls back to the page cache for good when
    /// the file system refuses a direct write).
    #[cfg(test)]
    pub(super) fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Whether no record was appended yet.
    pub(super) fn is_empty(&self) -> bool {
        self.end == self.records_from
    }

    /// Buffered bytes that make a write: direct writes each wait for the device, so they are
    /// made at least [`DIRECT_WRITE_BYTES`] large.
    fn write_at(&self) -> usize {
        if self.direct.is_some() {
            self.write_buffer.max(DIRECT_WRITE_BYTES)
        } else {
            self.write_buffer
        }
    }

    /// Writes what is buffered once there is enough of it.
    pub(super) fn write_if_full(&mut self) -> Result<()> {
        if self.buf.len() >= self.write_at() {
            self.write_blocks()?;
        }
        Ok(())
    }

    /// Hands every buffered byte to the OS so positional reads see it. Positional (the buffer
    /// ends at `end`), so that after a failed or short write (a full disk) the next call writes
    /// the same bytes at the same place and every location handed out stays true.
    ///
    /// In direct mode the last partial block is first filled with a padding record: a block a
    /// reader may have read through the page cache is never written again by a direct write
    /// (a page read back while a direct write of its block is in flight can stay in the cache
    /// with the old bytes; BookKeeper's direct-I/O entry logger pads for the same reason).
    pub(super) fn publish(&mut self) -> Result<()> {
        if self.direct.is_some() {
            let partial = self.buf.len() % DIRECT_ALIGN;
            if partial != 0 {
                let mut pad = DIRECT_ALIGN - partial;
                if pad < PADDING_MIN {
                    pad += DIRECT_ALIGN;
                }
                append_padding(&mut self.buf, pad);
                self.end += pad as u64;
            }
        }
        self.write_blocks()
    }

    /// Writes the buffered whole blocks (direct mode) or every buffered byte.
    fn write_blocks(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let at = self.end - self.buf.len() as u64;
        if let Some(direct) = &self.direct {
            let blocks = self.buf.len() / DIRECT_ALIGN * DIRECT_ALIGN;
            if blocks == 0 {
                return Ok(());
            }
            let whole = &self.buf.as_slice()[..blocks];
            match fs::write_direct_at(direct, &self.path, whole, at)? {
                DirectWrite::Done => {
                    self.buf.discard_front(blocks);
                    return Ok(());
                }
                DirectWrite::Refused => {
                    ::log::warn!(
                        "entry log {}: the file system refused a direct write; this log is \
                         written through the page cache",
                        self.path.display()
                    );
                    self.direct = None;
                }
            }
        }
        fs::write_all_at(&self.file, &self.path, self.buf.as_slice(), at)?;
        self.buf.clear();
        if self.end - self.writeback_from >= WRITEBACK_BYTES {
            fs::start_writeback(
                &self.file,
                self.writeback_from,
                self.end - self.writeback_from,
            );
            self.writeback_from = self.end;
        }
        Ok(())
    }

    /// Cuts the log back to logical end `end` with ledgers map `ledgers` (a failed append is
    /// undone): buffered bytes past it are dropped, written ones cut off the file (which gives
    /// a full disk its blocks back). A direct-I/O log cut inside a written block goes on through
    /// the page cache, since its next write no longer starts on a block boundary.
    pub(super) fn rewind_to(&mut self, end: u64, ledgers: LedgersMap) {
        let written = self.end - self.buf.len() as u64;
        if end >= written {
            self.buf.truncate((end - written) as usize);
        } else {
            self.buf.clear();
            if end % DIRECT_ALIGN as u64 != 0 {
                self.direct = None;
            }
            if let Err(e) = self.file.set_len(end) {
                ::log::warn!("cutting {} back to {end} bytes: {e}", self.path.display());
            }
        }
        self.end = end;
        self.ledgers = ledgers;
        self.writeback_from = self.writeback_from.min(end);
    }

    /// Writes the rest, appends the ledgers map, records its offset in the header and syncs.
    /// Positional throughout, so a seal that failed (a full disk) can simply be tried again.
    pub(super) fn seal(&mut self) -> Result<()> {
        self.publish()?;
        let map_offset = self.end;
        let mut rec = Vec::new();
        let body = encode_ledgers_map(&self.ledgers);
        append_record(
            &mut rec,
            &[&MAP_MARKER.to_be_bytes(), &MAP_MARKER.to_be_bytes(), &body],
        );
        fs::write_all_at(&self.file, &self.path, &rec, map_offset)?;
        fs::write_all_at(
            &self.file,
            &self.path,
            &map_offset.to_be_bytes(),
            MAP_OFFSET_AT,
        )?;
        fs::fdatasync(&self.file, &self.path)
    }
}

/// The smallest padding record: frame header plus the two ids.
const PADDING_MIN: usize = RECORD_HEADER_LEN + 16;

/// Appends a padding record of exactly `len` bytes (at least [`PADDING_MIN`]): ledger id
/// [`PAD_MARKER`], entry 0, zeros. Scans skip it; to a build that predates it, it is an entry
/// of a ledger that does not exist, which garbage collection drops.
fn append_padding(out: &mut impl RecordSink, len: usize) {
    static ZEROS: [u8; 2 * DIRECT_ALIGN] = [0; 2 * DIRECT_ALIGN];
    // Why: a padding of another length would end the flush off the block boundary that direct
    // writes rely on (once per flush, not per entry).
    assert!(
        (PADDING_MIN..=ZEROS.len()).contains(&len),
        "padding record of {len} bytes"
    );
    let zeros = &ZEROS[..len - PADDING_MIN];
    append_record(
        out,
        &[&PAD_MARKER.to_be_bytes(), &0u64.to_be_bytes(), zeros],
    );
}

/// Calls `f(ledger, entry, offset, data)` for every entry record of the log, in file order,
/// up to a torn tail or the ledgers map.
pub fn scan_entries(path: &Path, mut f: impl FnMut(u64, u64, u64, &[u8])) -> Result<()> {
    let mut file = fs::open_read(path)?;
    let mut header = [0u8; FILE_HEADER_LEN];
    if file.read_exact(&mut header).is_err() {
        return Ok(());
    }
    check_file_header(&header, LOG_MAGIC, LOG_VERSION, "entry log")?;
    let mut reader = RecordReader::new(file, FILE_HEADER_LEN as u64, path.display().to_string());
    loop {
        match reader.next_record()? {
            Ok(rec) if rec.body.len() >= 16 => {
                let ledger = be_u64(&rec.body[0..8]);
                if ledger == MAP_MARKER {
                    return Ok(());
                }
                if ledger == PAD_MARKER {
                    continue;
                }
                f(
                    ledger,
                    be_u64(&rec.body[8..16]),
                    rec.offset,
                    &rec.body[16..],
                );
            }
            _ => return Ok(()),
        }
    }
}

/// Reads a log's ledgers map from its seal, or rebuilds it by scanning the records.
pub fn read_ledgers_map(path: &Path) -> Result<LedgersMap> {
    let mut file = fs::open_read(path)?;
    let mut header = [0u8; FILE_HEADER_LEN];
    if file.read_exact(&mut header).is_err() {
        // Created but never given its header (a crash at rollover): it holds no entries.
        return Ok(LedgersMap::new());
    }
    check_file_header(&header, LOG_MAGIC, LOG_VERSION, "entry log")?;
    let map_offset = be_u64(&header[MAP_OFFSET_AT as usize..]);
    if map_offset != 0 {
        let file_len = file
            .metadata()
            .ctx(|| format!("reading the size of {}", path.display()))?
            .len();
        // A damaged header may point anywhere: a map larger than this is not read whole.
        let tail_len = file_len.saturating_sub(map_offset);
        let sealed = (tail_len <= MAX_MAP_READ)
            .then(|| {
                let mut tail = vec![0u8; tail_len as usize];
                file.read_exact_at(&mut tail, map_offset).ok()?;
                let len = be_u32(tail.get(0..4)?) as usize;
                let end = RECORD_HEADER_LEN.checked_add(len)?;
                let body = verify_record(tail.get(..end)?, String::new).ok()?;
                (be_u64(body.get(0..8)?) == MAP_MARKER)
                    .then(|| decode_ledgers_map(body.get(16..)?))?
            })
            .flatten();
        if let Some(map) = sealed {
            return Ok(map);
        }
        log::warn!(
            "entry log {}: unreadable ledgers map, scanning",
            path.display()
        );
    }
    let mut reader = RecordReader::new(file, FILE_HEADER_LEN as u64, path.display().to_string());
    let mut map = LedgersMap::new();
    loop {
        match reader.next_record()? {
            Ok(rec) if rec.body.len() >= 16 => {
                let ledger = be_u64(&rec.body[0..8]);
                if ledger == MAP_MARKER {
                    break;
                }
                if ledger == PAD_MARKER {
                    continue;
                }
                *map.entry(ledger).or_insert(0) += rec.size;
            }
            Ok(_) => break,
            Err(ScanEnd::Torn(why)) => {
                log::warn!("entry log {}: scan stopped: {why}", path.display());
                break;
            }
            Err(_) => break,
        }
    }
    Ok(map)
}
