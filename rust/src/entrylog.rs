//! Entry logs: entry data appended across the ledger directories, read back by location.
//! It owns the `.log` files and their ledgers maps; it never decides what is durable.
//!
//! A location is `log_id << 32 | offset` of a record `[len][crc32c][ledger][entry][data]`.
//! A log is sealed at rollover and close: a ledgers-map record (ledger -> bytes) is appended
//! and its offset written into the header, so garbage collection need not scan the log.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::error::{IoContext, Result, StorageError};
use crate::journal::sync_dir;
use crate::record::{
    append_record, be_u32, be_u64, check_file_header, file_header, verify_record, RecordReader,
    ScanEnd, FILE_HEADER_LEN, RECORD_HEADER_LEN,
};

const LOG_MAGIC: &[u8; 8] = b"PBKXELOG";
const LOG_VERSION: u32 = 1;
/// The header's spare field holds the ledgers-map offset once the log is sealed.
const MAP_OFFSET_AT: u64 = 24;
/// Ledger id of the ledgers-map record; real ledger ids are non-negative i64.
const MAP_MARKER: u64 = u64::MAX;
/// Bytes of a record before the entry data: frame header plus ledger and entry ids.
pub const ENTRY_RECORD_OVERHEAD: usize = RECORD_HEADER_LEN + 16;

/// Where an entry is stored: its location and the length of its record body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub loc: u64,
    pub len: u32,
}

impl Location {
    pub fn log_id(&self) -> u32 {
        (self.loc >> 32) as u32
    }
    pub fn offset(&self) -> u64 {
        self.loc & 0xFFFF_FFFF
    }
    /// Length of the entry data alone.
    pub fn data_len(&self) -> usize {
        self.len as usize - 16
    }
}

pub type LedgersMap = HashMap<u64, u64>;

struct ActiveLog {
    id: u32,
    path: PathBuf,
    file: File,
    /// A second descriptor of the same file, so a checkpoint can fdatasync it without holding
    /// the lock that appends need (a sync under the lock would stall acknowledgements).
    sync_handle: Arc<File>,
    /// Logical end: bytes written plus bytes still in `buf`.
    end: u64,
    buf: Vec<u8>,
    ledgers: LedgersMap,
}

/// All entry logs of a bookie.
pub struct EntryLogger {
    dirs: Vec<PathBuf>,
    size_limit: u64,
    write_buffer: usize,
    active: Mutex<Option<ActiveLog>>,
    next_id: Mutex<u32>,
    next_dir: Mutex<usize>,
    files: RwLock<HashMap<u32, Arc<File>>>,
    pub rollovers: AtomicU64,
}

fn log_name(id: u32) -> String {
    format!("{id:x}.log")
}

/// Ids of the entry logs in `dir`.
fn list_log_ids(dir: &Path) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    for ent in fs::read_dir(dir).ctx(|| format!("listing {}", dir.display()))? {
        let ent = ent.ctx(|| format!("listing {}", dir.display()))?;
        let name = ent.file_name();
        if let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|s| u32::from_str_radix(s, 16).ok())
        {
            ids.push(id);
        }
    }
    Ok(ids)
}

impl EntryLogger {
    /// Opens the entry logs under `dirs` (each a `current/` directory). New logs get ids above
    /// every existing one; the first log is created on the first append.
    pub fn open(dirs: Vec<PathBuf>, size_limit: u64, write_buffer: usize) -> Result<Self> {
        let mut max_id = 0u32;
        for d in &dirs {
            for id in list_log_ids(d)? {
                max_id = max_id.max(id);
            }
        }
        let next_id = max_id
            .checked_add(1)
            .ok_or_else(|| StorageError::Corruption("entry log ids exhausted".to_string()))?;
        Ok(EntryLogger {
            dirs,
            size_limit,
            write_buffer: write_buffer.max(4096),
            active: Mutex::new(None),
            next_id: Mutex::new(next_id),
            next_dir: Mutex::new(0),
            files: RwLock::new(HashMap::new()),
            rollovers: AtomicU64::new(0),
        })
    }

    fn new_log(&self) -> Result<ActiveLog> {
        let id = {
            let mut next = self.next_id.lock();
            let id = *next;
            *next = id
                .checked_add(1)
                .ok_or_else(|| StorageError::Corruption("entry log ids exhausted".into()))?;
            id
        };
        // Round-robin over the ledger directories spreads data and I/O across disks.
        let dir = {
            let mut n = self.next_dir.lock();
            let d = self.dirs[*n % self.dirs.len()].clone();
            *n += 1;
            d
        };
        let path = dir.join(log_name(id));
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .ctx(|| format!("creating entry log {}", path.display()))?;
        file.write_all(&file_header(LOG_MAGIC, LOG_VERSION, id as u64))
            .ctx(|| format!("writing entry log header {}", path.display()))?;
        file.sync_all()
            .ctx(|| format!("syncing new entry log {}", path.display()))?;
        sync_dir(&dir)?;
        let reader = File::open(&path).ctx(|| format!("opening {}", path.display()))?;
        self.files.write().insert(id, Arc::new(reader));
        let sync_handle = Arc::new(
            file.try_clone()
                .ctx(|| format!("duplicating {}", path.display()))?,
        );
        Ok(ActiveLog {
            id,
            path,
            file,
            sync_handle,
            end: FILE_HEADER_LEN as u64,
            buf: Vec::with_capacity(self.write_buffer + (64 << 10)),
            ledgers: HashMap::new(),
        })
    }

    /// Appends entries; returns their locations in order. Data is buffered: call [`flush`]
    /// before publishing the locations to readers.
    pub fn append<'a>(
        &self,
        entries: impl IntoIterator<Item = (u64, u64, &'a [u8])>,
        out: &mut Vec<Location>,
    ) -> Result<()> {
        let mut guard = self.active.lock();
        for (ledger, entry, data) in entries {
            let size = (ENTRY_RECORD_OVERHEAD + data.len()) as u64;
            let must_roll = match guard.as_ref() {
                None => true,
                Some(log) => log.end + size > self.size_limit && log.end > FILE_HEADER_LEN as u64,
            };
            if must_roll {
                if let Some(old) = guard.take() {
                    self.seal(old)?;
                    self.rollovers.fetch_add(1, Ordering::Relaxed);
                }
                *guard = Some(self.new_log()?);
            }
            let Some(log) = guard.as_mut() else {
                return Err(StorageError::Closed);
            };
            let offset = log.end;
            append_record(
                &mut log.buf,
                &[&ledger.to_be_bytes(), &entry.to_be_bytes(), data],
            );
            log.end += size;
            *log.ledgers.entry(ledger).or_insert(0) += size;
            out.push(Location {
                loc: ((log.id as u64) << 32) | offset,
                len: (16 + data.len()) as u32,
            });
            if log.buf.len() >= self.write_buffer {
                write_buf(log)?;
            }
        }
        Ok(())
    }

    /// Hands buffered data to the OS so positional reads see it.
    pub fn flush(&self) -> Result<()> {
        if let Some(log) = self.active.lock().as_mut() {
            write_buf(log)?;
        }
        Ok(())
    }

    /// Makes everything published so far durable: every indexed location was written to its
    /// file before it was published, and sealed logs were synced when sealed, so syncing the
    /// active log (outside the append lock) covers them all.
    pub fn sync(&self) -> Result<()> {
        let active = self
            .active
            .lock()
            .as_ref()
            .map(|log| (log.sync_handle.clone(), log.path.clone()));
        if let Some((handle, path)) = active {
            handle
                .sync_data()
                .ctx(|| format!("fdatasync {}", path.display()))?;
        }
        Ok(())
    }

    /// Seals the active log; the next append starts a new one.
    pub fn close(&self) -> Result<()> {
        if let Some(log) = self.active.lock().take() {
            self.seal(log)?;
        }
        Ok(())
    }

    fn seal(&self, mut log: ActiveLog) -> Result<()> {
        write_buf(&mut log)?;
        let map_offset = log.end;
        let mut rec = Vec::new();
        let body = encode_ledgers_map(&log.ledgers);
        append_record(
            &mut rec,
            &[&MAP_MARKER.to_be_bytes(), &MAP_MARKER.to_be_bytes(), &body],
        );
        log.file
            .write_all(&rec)
            .and_then(|_| {
                log.file
                    .write_all_at(&map_offset.to_be_bytes(), MAP_OFFSET_AT)
            })
            .and_then(|_| log.file.sync_data())
            .ctx(|| format!("sealing entry log {}", log.path.display()))?;
        Ok(())
    }

    fn file(&self, id: u32) -> Result<Arc<File>> {
        if let Some(f) = self.files.read().get(&id) {
            return Ok(f.clone());
        }
        for d in &self.dirs {
            let path = d.join(log_name(id));
            if path.exists() {
                let f = Arc::new(File::open(&path).ctx(|| format!("opening {}", path.display()))?);
                self.files.write().insert(id, f.clone());
                return Ok(f);
            }
        }
        Err(StorageError::Corruption(format!(
            "entry log {} is missing from every ledger directory",
            log_name(id)
        )))
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
    /// back in one log (the common case for a ledger written by one writer). Returns the
    /// entries read before the first failure, and that failure.
    pub fn read_run(
        &self,
        ledger: u64,
        items: &[(u64, Location)],
    ) -> (Vec<Bytes>, Option<StorageError>) {
        const MAX_READ: u64 = 4 << 20;
        let mut out = Vec::with_capacity(items.len());
        let mut i = 0;
        while i < items.len() {
            let first = items[i].1;
            let mut end = first.offset() + (RECORD_HEADER_LEN as u64) + first.len as u64;
            let mut j = i + 1;
            while j < items.len()
                && items[j].1.log_id() == first.log_id()
                && items[j].1.offset() == end
                && end - first.offset() < MAX_READ
            {
                end += (RECORD_HEADER_LEN as u64) + items[j].1.len as u64;
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

    fn pread(&self, log_id: u32, offset: u64, len: u64) -> Result<Bytes> {
        let file = self.file(log_id)?;
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, offset)
            .ctx(|| format!("reading {} bytes at {}:{offset}", len, log_name(log_id)))?;
        Ok(Bytes::from(buf))
    }

    /// The ledgers map of every log: from its sealed map, by scanning an unsealed log, or from
    /// memory for the active one.
    pub fn ledgers_maps(&self) -> Result<HashMap<u32, LedgersMap>> {
        let mut out = HashMap::new();
        let active_id = self
            .active
            .lock()
            .as_ref()
            .map(|l| (l.id, l.ledgers.clone()));
        for d in &self.dirs {
            for id in list_log_ids(d)? {
                match &active_id {
                    Some((aid, map)) if *aid == id => {
                        out.insert(id, map.clone());
                    }
                    _ => {
                        out.insert(id, read_ledgers_map(&d.join(log_name(id)))?);
                    }
                }
            }
        }
        Ok(out)
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

fn write_buf(log: &mut ActiveLog) -> Result<()> {
    if log.buf.is_empty() {
        return Ok(());
    }
    log.file
        .write_all(&log.buf)
        .ctx(|| format!("writing entry log {}", log.path.display()))?;
    log.buf.clear();
    Ok(())
}

fn encode_ledgers_map(map: &LedgersMap) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + map.len() * 16);
    body.extend_from_slice(&(map.len() as u32).to_be_bytes());
    let mut items: Vec<_> = map.iter().collect();
    items.sort_unstable();
    for (ledger, bytes) in items {
        body.extend_from_slice(&ledger.to_be_bytes());
        body.extend_from_slice(&bytes.to_be_bytes());
    }
    body
}

fn decode_ledgers_map(body: &[u8]) -> Option<LedgersMap> {
    let n = be_u32(body.get(0..4)?) as usize;
    let items = body.get(4..4 + n * 16)?;
    Some(
        items
            .chunks_exact(16)
            .map(|c| (be_u64(&c[0..8]), be_u64(&c[8..16])))
            .collect(),
    )
}

/// Reads a log's ledgers map from its seal, or rebuilds it by scanning the records.
pub fn read_ledgers_map(path: &Path) -> Result<LedgersMap> {
    let mut file = File::open(path).ctx(|| format!("opening {}", path.display()))?;
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
        let mut tail = vec![0u8; file_len.saturating_sub(map_offset) as usize];
        let sealed = file
            .read_exact_at(&mut tail, map_offset)
            .ok()
            .and_then(|_| {
                let len = be_u32(tail.get(0..4)?) as usize;
                let body = verify_record(tail.get(..RECORD_HEADER_LEN + len)?, String::new).ok()?;
                (be_u64(&body[0..8]) == MAP_MARKER).then(|| decode_ledgers_map(&body[16..]))?
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_read_and_rollover_with_sealed_maps() {
        let d1 = tempfile::tempdir().unwrap();
        let d2 = tempfile::tempdir().unwrap();
        let dirs = vec![d1.path().to_path_buf(), d2.path().to_path_buf()];
        let el = EntryLogger::open(dirs.clone(), 8192, 4096).unwrap();
        let mut locs = Vec::new();
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 500]).collect();
        el.append(
            payloads
                .iter()
                .enumerate()
                .map(|(i, p)| (1 + (i as u64 % 2), i as u64, p.as_slice())),
            &mut locs,
        )
        .unwrap();
        el.flush().unwrap();
        for (i, at) in locs.iter().enumerate() {
            let got = el.read(1 + (i as u64 % 2), i as u64, *at).unwrap();
            assert_eq!(&got[..], &payloads[i][..]);
        }
        // A location read as the wrong entry is detected, not misread.
        assert!(el.read(1, 99, locs[0]).is_err());
        assert!(el.rollovers.load(Ordering::Relaxed) >= 2);
        el.close().unwrap();
        let maps = el.ledgers_maps().unwrap();
        assert!(maps.len() >= 3);
        let total: u64 = maps.values().flat_map(|m| m.values()).sum();
        assert_eq!(total, 40 * (500 + ENTRY_RECORD_OVERHEAD as u64));
        assert!(!list_log_ids(d1.path()).unwrap().is_empty());
        assert!(!list_log_ids(d2.path()).unwrap().is_empty());

        // Reopened, new logs take new ids and old data stays readable.
        let el = EntryLogger::open(dirs, 8192, 4096).unwrap();
        assert_eq!(&el.read(1, 0, locs[0]).unwrap()[..], &payloads[0][..]);
        let mut more = Vec::new();
        el.append([(3u64, 0u64, &b"x"[..])], &mut more).unwrap();
        assert!(more[0].log_id() > locs.last().unwrap().log_id());
    }

    #[test]
    fn unsealed_log_map_is_rebuilt_by_scanning() {
        let d = tempfile::tempdir().unwrap();
        let el = EntryLogger::open(vec![d.path().to_path_buf()], 1 << 20, 4096).unwrap();
        let mut locs = Vec::new();
        el.append(
            [(5u64, 0u64, &[1u8; 100][..]), (6, 0, &[2u8; 50][..])],
            &mut locs,
        )
        .unwrap();
        el.flush().unwrap();
        // Simulate a crash: never sealed.
        let path = d.path().join(log_name(locs[0].log_id()));
        let map = read_ledgers_map(&path).unwrap();
        assert_eq!(map[&5], 100 + ENTRY_RECORD_OVERHEAD as u64);
        assert_eq!(map[&6], 50 + ENTRY_RECORD_OVERHEAD as u64);
        // A log cut before its header was written holds nothing.
        let empty = d.path().join(log_name(999));
        File::create(&empty).unwrap();
        assert!(read_ledgers_map(&empty).unwrap().is_empty());
    }

    #[test]
    fn corrupt_record_is_reported_on_read() {
        let d = tempfile::tempdir().unwrap();
        let el = EntryLogger::open(vec![d.path().to_path_buf()], 1 << 20, 4096).unwrap();
        let mut locs = Vec::new();
        el.append([(1u64, 0u64, &[9u8; 64][..])], &mut locs)
            .unwrap();
        el.flush().unwrap();
        let path = d.path().join(log_name(locs[0].log_id()));
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0xFF], locs[0].offset() + 40).unwrap();
        assert!(matches!(
            el.read(1, 0, locs[0]),
            Err(StorageError::Corruption(_))
        ));
    }
}
