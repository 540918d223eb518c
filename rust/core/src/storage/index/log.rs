//! The file that persists the index: `index.log`, checkpoints appended as deltas, rewritten as
//! a snapshot when it outgrows the live state. It never decides what changed.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::{checkpoint_record, Index};
use crate::error::{IoContext, Result, StorageError};
use crate::fs;
use crate::record::{check_file_header, file_header, RecordReader, ScanEnd, FILE_HEADER_LEN};

const INDEX_MAGIC: &[u8; 8] = b"PBKXINDX";
/// Version 2 keeps locations in segments; version 1 (locations in this file) is migrated.
const INDEX_VERSION: u32 = 2;

/// The file that persists the index: `<dir>/index.log`.
pub struct IndexLog {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    size: u64,
    /// Size of the last snapshot, to decide when rewriting pays off.
    base_size: u64,
    /// Format version of the file as opened (1: must be rewritten after migration).
    pub version: u32,
}

const INDEX_FILE: &str = "index.log";
const INDEX_TMP: &str = "index.log.tmp";

impl IndexLog {
    /// Opens (or creates) the index log in `dir` and loads it into an [`Index`]. A torn final
    /// checkpoint is cut off; everything before it is intact.
    pub fn open(dir: &Path) -> Result<(IndexLog, Index)> {
        let path = dir.join(INDEX_FILE);
        let tmp = dir.join(INDEX_TMP);
        if tmp.exists() {
            fs::remove_file(&tmp)?; // a rewrite that never reached its rename
        }
        if !path.exists() {
            let mut index = Index {
                next_seq: 1,
                ..Index::default()
            };
            let mut data = file_header(INDEX_MAGIC, INDEX_VERSION, 0).to_vec();
            index.take_delta(true, &mut data);
            checkpoint_record(&[], index.next_seq, &[], &mut data);
            let log = IndexLog::write_new(dir, &data)?;
            return Ok((log, index));
        }
        let mut file = fs::open_rw(&path)?;
        let mut header = [0u8; FILE_HEADER_LEN];
        file.read_exact(&mut header)
            .ctx(|| format!("reading the header of {}", path.display()))?;
        check_file_header(&header, INDEX_MAGIC, INDEX_VERSION, "index log")?;
        let version = crate::record::be_u32(&header[8..12]);
        let reader_file = file
            .try_clone()
            .ctx(|| format!("opening {}", path.display()))?;
        let mut reader = RecordReader::new(
            reader_file,
            FILE_HEADER_LEN as u64,
            path.display().to_string(),
        );
        let mut index = Index::default();
        let mut good_end = None;
        loop {
            match reader.next_record()? {
                Ok(rec) => match index.load_record(version, rec.body) {
                    Ok(true) => good_end = Some(reader.offset()),
                    Ok(false) => {}
                    Err(why) => {
                        log::warn!("{}: {why}", path.display());
                        break;
                    }
                },
                Err(ScanEnd::Torn(why)) => {
                    log::warn!(
                        "{}: torn tail after the last checkpoint: {why}",
                        path.display()
                    );
                    break;
                }
                Err(_) => break,
            }
        }
        let Some(end) = good_end else {
            return Err(StorageError::Corruption(format!(
                "{} holds no complete checkpoint",
                path.display()
            )));
        };
        // Records after the last checkpoint record came from an interrupted checkpoint. They are
        // true (they describe durable state) but the file must end at a record boundary.
        fs::truncate_and_sync(&file, &path, end)?;
        file.seek(SeekFrom::Start(end))
            .ctx(|| format!("seeking {}", path.display()))?;
        if index.next_seq == 0 {
            index.next_seq = 1;
        }
        let log = IndexLog {
            dir: dir.to_path_buf(),
            path,
            file,
            size: end,
            base_size: end,
            version,
        };
        Ok((log, index))
    }

    fn write_new(dir: &Path, data: &[u8]) -> Result<IndexLog> {
        let tmp = dir.join(INDEX_TMP);
        let path = dir.join(INDEX_FILE);
        {
            let f = fs::create_truncate(&tmp)?;
            fs::write_all(&f, &tmp, data)?;
            fs::fsync(&f, &tmp)?;
        }
        fs::rename(&tmp, &path)?;
        fs::sync_dir(dir)?;
        let mut file = fs::open_rw(&path)?;
        file.seek(SeekFrom::End(0))
            .ctx(|| format!("seeking {}", path.display()))?;
        Ok(IndexLog {
            dir: dir.to_path_buf(),
            path,
            file,
            size: data.len() as u64,
            base_size: data.len() as u64,
            version: INDEX_VERSION,
        })
    }

    /// Whether the next checkpoint should rewrite the whole index instead of appending.
    pub fn wants_snapshot(&self) -> bool {
        self.size > 64 << 20 && self.size > 2 * self.base_size
    }

    /// Appends one checkpoint's records and makes them durable.
    pub fn append(&mut self, data: &[u8]) -> Result<()> {
        fs::write_all(&self.file, &self.path, data)?;
        fs::fdatasync(&self.file, &self.path)?;
        self.size += data.len() as u64;
        Ok(())
    }

    /// Replaces the whole log by a snapshot (records without the file header).
    pub fn rewrite(&mut self, records: &[u8]) -> Result<()> {
        let mut data = file_header(INDEX_MAGIC, INDEX_VERSION, 0).to_vec();
        data.extend_from_slice(records);
        *self = IndexLog::write_new(&self.dir, &data)?;
        Ok(())
    }
}
