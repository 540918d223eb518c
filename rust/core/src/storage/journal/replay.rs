//! Reading journals back: replay after the last checkpoint (cutting a torn tail of the newest
//! file) and a read-only scan for tools. It never writes a record.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::Path;

use super::file::{journal_path, list_journal_ids, JOURNAL_MAGIC, JOURNAL_VERSION};
use super::op::{file_tag, record_tag};
use super::{JournalOp, Mark};
use crate::error::{IoContext, Result, StorageError};
use crate::fs;
use crate::record::{be_u32, check_file_header, RecordReader, ScanEnd, FILE_HEADER_LEN};

/// Where replay of one directory ended, and the id the next journal file must take.
pub struct ReplayEnd {
    pub mark: Mark,
    pub next_file_id: u64,
}

/// Replays the records of `dir` from `from`, handing them to `sink` in batches with the mark
/// just after each batch. A torn or corrupt tail of the newest file is cut (truncated) with a
/// warning; damage in an older file is an error unless `skip_invalid`.
pub fn replay(
    dir: &Path,
    from: Mark,
    skip_invalid: bool,
    mut sink: impl FnMut(&[JournalOp], Mark) -> Result<()>,
) -> Result<ReplayEnd> {
    let all = list_journal_ids(dir)?;
    let next_file_id = all.last().map_or(1, |id| id + 1).max(from.file_id + 1);
    let ids: Vec<u64> = all.into_iter().filter(|id| *id >= from.file_id).collect();
    if from.file_id > 0 && ids.first() != Some(&from.file_id) {
        return Err(StorageError::Corruption(format!(
            "journal {} named by the last checkpoint is missing",
            journal_path(dir, from.file_id).display()
        )));
    }
    let mut mark = from;
    for (n, id) in ids.iter().enumerate() {
        let newest = n + 1 == ids.len();
        let path = journal_path(dir, *id);
        let Some((file, version)) = open_for_replay(&path, *id, newest)? else {
            continue;
        };
        let start = if *id == from.file_id {
            from.offset.max(FILE_HEADER_LEN as u64)
        } else {
            FILE_HEADER_LEN as u64
        };
        let (end, data_end) = replay_file(file, &path, *id, version, start, &mut sink)?;
        mark = Mark {
            file_id: *id,
            offset: data_end,
        };
        if let ScanEnd::Torn(why) = end {
            handle_damage(&path, data_end, &why, newest, skip_invalid)?;
        }
    }
    Ok(ReplayEnd { mark, next_file_id })
}

/// Opens journal `id` at `path` and checks its header; returns it with its format version, or
/// None if it is the newest file and its header is incomplete (a crash while creating it:
/// nothing in it was ever acknowledged, so it is removed).
fn open_for_replay(path: &Path, id: u64, newest: bool) -> Result<Option<(File, u32)>> {
    let mut file = fs::open_read(path)?;
    let mut header = [0u8; FILE_HEADER_LEN];
    let header_ok = std::io::Read::read_exact(&mut file, &mut header).is_ok();
    if !header_ok || check_file_header(&header, JOURNAL_MAGIC, JOURNAL_VERSION, "journal")? != id {
        if newest && !header_ok {
            log::warn!(
                "journal {} has no complete header; removing it",
                path.display()
            );
            fs::remove_file(path)?;
            return Ok(None);
        }
        return Err(StorageError::Corruption(format!(
            "journal {} has a bad header",
            path.display()
        )));
    }
    Ok(Some((file, be_u32(&header[8..12]))))
}

/// Hands the records of journal `id` (format `version`) from offset `start` to `sink`, in
/// batches with the mark just after each; the last batch ends where the data ends. Returns how
/// the scan ended and where the data ends.
fn replay_file(
    mut file: File,
    path: &Path,
    id: u64,
    version: u32,
    start: u64,
    sink: &mut impl FnMut(&[JournalOp], Mark) -> Result<()>,
) -> Result<(ScanEnd, u64)> {
    const BATCH_OPS: usize = 4096;
    const BATCH_BYTES: usize = 32 << 20;
    file.seek(SeekFrom::Start(start))
        .ctx(|| format!("seeking journal {}", path.display()))?;
    let mut reader = RecordReader::new(file, start, path.display().to_string());
    let mut batch: Vec<JournalOp> = Vec::new();
    let mut batch_bytes = 0usize;
    // Where the data ends when the last record read is not part of it.
    let mut ends_before: Option<u64> = None;
    let end = loop {
        match reader.next_record()? {
            Ok(rec) => {
                if is_previous_life(rec.body, version, id) {
                    ends_before = Some(rec.offset);
                    break ScanEnd::Clean;
                }
                match JournalOp::decode(rec.body, version) {
                    Ok(op) => batch.push(op),
                    Err(why) => {
                        ends_before = Some(rec.offset);
                        break ScanEnd::Torn(why);
                    }
                }
                batch_bytes += rec.size as usize;
            }
            Err(end) => break end,
        }
        if batch.len() >= BATCH_OPS || batch_bytes >= BATCH_BYTES {
            let mark = Mark {
                file_id: id,
                offset: reader.offset(),
            };
            sink(&batch, mark)?;
            batch.clear();
            batch_bytes = 0;
        }
    };
    let data_end = ends_before.unwrap_or_else(|| reader.offset());
    let mark = Mark {
        file_id: id,
        offset: data_end,
    };
    sink(&batch, mark)?;
    Ok((end, data_end))
}

/// Damage at `at` in journal `path` (`why`): the torn tail of the newest file is cut; in an
/// older file it is skipped with `skip_invalid`, else an error (newer journals follow it).
fn handle_damage(path: &Path, at: u64, why: &str, newest: bool, skip_invalid: bool) -> Result<()> {
    if newest {
        log::warn!(
            "journal {}: cutting a torn tail at offset {at} ({why})",
            path.display()
        );
        let f = fs::open_write(path)?;
        fs::truncate_and_sync(&f, path, at)?;
    } else if skip_invalid {
        log::warn!(
            "journal {}: skipping the rest after offset {at} ({why})",
            path.display()
        );
    } else {
        return Err(StorageError::Corruption(format!(
            "journal {} is damaged at offset {at} ({why}) and newer journals follow it; \
             set skipReplayJournalInvalidRecord=true to skip the damaged part",
            path.display()
        )));
    }
    Ok(())
}

/// One decoded record of a journal file, for tools.
#[derive(Debug, Clone)]
pub struct RecordInfo {
    pub offset: u64,
    pub size: u64,
    pub kind: &'static str,
    pub ledger: u64,
    pub entry: Option<u64>,
}

/// Decodes a whole journal file without changing it: its records, where valid data ends, and why.
pub fn scan_file(path: &Path) -> Result<(Vec<RecordInfo>, u64, String)> {
    let mut file = fs::open_read(path)?;
    let mut header = [0u8; FILE_HEADER_LEN];
    std::io::Read::read_exact(&mut file, &mut header)
        .ctx(|| format!("reading the header of {}", path.display()))?;
    let id = check_file_header(&header, JOURNAL_MAGIC, JOURNAL_VERSION, "journal")?;
    let version = be_u32(&header[8..12]);
    // A tool may scan the journal a bookie is writing with direct I/O, which rewrites the last
    // partial block; a page this read caches while such a write is in flight could keep the
    // old bytes for the next replay to read, so the scan leaves none of its pages behind.
    let pages = file
        .try_clone()
        .ctx(|| format!("opening {} again", path.display()))?;
    let mut reader = RecordReader::new(file, FILE_HEADER_LEN as u64, path.display().to_string());
    let mut out = Vec::new();
    let (end, reason) = loop {
        let next = reader.next_record();
        if next.is_err() {
            fs::advise_dont_need(&pages, 0, 0);
        }
        match next? {
            Ok(rec) => {
                let (offset, size) = (rec.offset, rec.size);
                if is_previous_life(rec.body, version, id) {
                    break (
                        offset,
                        "end of written data (older records of a reused file follow)".to_string(),
                    );
                }
                match JournalOp::decode(rec.body, version) {
                    Ok(op) => out.push(RecordInfo {
                        offset,
                        size,
                        kind: op.kind_name(),
                        ledger: op.ledger(),
                        entry: match op {
                            JournalOp::Entry { entry, .. } => Some(entry),
                            _ => None,
                        },
                    }),
                    Err(why) => break (offset, why),
                }
            }
            Err(ScanEnd::Clean) => break (reader.offset(), "end of written data".to_string()),
            Err(ScanEnd::EndOfFile) => break (reader.offset(), "end of file".to_string()),
            Err(ScanEnd::Torn(why)) => break (reader.offset(), why),
        }
    };
    fs::advise_dont_need(&pages, 0, 0);
    Ok((out, end, reason))
}

/// Whether a record read from journal `file_id` (format `version`) belongs to the file's
/// previous life: a reused file keeps its old records after the new ones, whole and with valid
/// checksums, tagged with the id it had then.
fn is_previous_life(body: &[u8], version: u32, file_id: u64) -> bool {
    version >= 3 && record_tag(body, version) != Some(file_tag(file_id))
}
