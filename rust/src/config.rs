//! Storage configuration under Apache BookKeeper's key names and defaults.
//! It only parses and validates; it never touches the file system.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Result, StorageError};

/// One configuration value as it arrives from a properties file or keyword arguments.
#[derive(Debug, Clone)]
pub enum ConfValue {
    Str(String),
    Int(i64),
    Bool(bool),
    List(Vec<String>),
}

/// Group commit and file policy of the journal (BookKeeper's `journal*` keys).
#[derive(Debug, Clone)]
pub struct JournalConfig {
    pub max_group_wait: Duration,
    pub buffered_writes_threshold: usize,
    pub buffered_entries_threshold: usize,
    pub flush_when_queue_empty: bool,
    pub sync_data: bool,
    pub write_buffer_size: usize,
    pub prealloc_size: u64,
    pub max_file_size: u64,
    pub max_backups: usize,
    pub queue_size: usize,
    pub page_cache_flush_interval: Duration,
    pub skip_replay_invalid_record: bool,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            max_group_wait: Duration::from_millis(2),
            buffered_writes_threshold: 512 * 1024,
            buffered_entries_threshold: 0,
            flush_when_queue_empty: false,
            sync_data: true,
            write_buffer_size: 64 * 1024,
            prealloc_size: 16 << 20,
            max_file_size: 2048 << 20,
            max_backups: 5,
            queue_size: 10_000,
            page_cache_flush_interval: Duration::from_millis(1000),
            skip_replay_invalid_record: false,
        }
    }
}

/// Everything `LedgerStorage::open` needs.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    pub journal_dirs: Vec<PathBuf>,
    pub ledger_dirs: Vec<PathBuf>,
    pub index_dirs: Vec<PathBuf>,
    pub journal: JournalConfig,
    /// Entry log rollover size (`logSizeLimit`).
    pub log_size_limit: u64,
    /// Entry log write buffer (`writeBufferSizeBytes`).
    pub entry_log_write_buffer: usize,
    /// Checkpoint period (`flushInterval`); zero disables the timer.
    pub flush_interval: Duration,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            journal_dirs: vec![PathBuf::from("/tmp/bk-txn")],
            ledger_dirs: vec![PathBuf::from("/tmp/bk-data")],
            index_dirs: Vec::new(),
            journal: JournalConfig::default(),
            log_size_limit: 1 << 30,
            entry_log_write_buffer: 64 * 1024,
            flush_interval: Duration::from_millis(10_000),
        }
    }
}

/// Entry log offsets are 32-bit inside a location, so a log may not grow past this.
pub const MAX_LOG_SIZE_LIMIT: u64 = (u32::MAX as u64) - (64 << 20);

fn bad(key: &str, why: &str) -> StorageError {
    StorageError::InvalidArgument(format!("configuration {key}: {why}"))
}

fn int(key: &str, v: &ConfValue, min: i64) -> Result<i64> {
    let n = match v {
        ConfValue::Int(n) => *n,
        ConfValue::Str(s) => s
            .trim()
            .parse::<i64>()
            .map_err(|_| bad(key, &format!("expected an integer, got {s:?}")))?,
        _ => return Err(bad(key, "expected an integer")),
    };
    if n < min {
        return Err(bad(key, &format!("must be >= {min}, got {n}")));
    }
    Ok(n)
}

fn boolean(key: &str, v: &ConfValue) -> Result<bool> {
    match v {
        ConfValue::Bool(b) => Ok(*b),
        ConfValue::Int(n) => Ok(*n != 0),
        ConfValue::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            _ => Err(bad(key, &format!("expected true or false, got {s:?}"))),
        },
        ConfValue::List(_) => Err(bad(key, "expected true or false")),
    }
}

fn dirs(key: &str, v: &ConfValue) -> Result<Vec<PathBuf>> {
    let items: Vec<String> = match v {
        ConfValue::Str(s) => s.split(',').map(|p| p.trim().to_string()).collect(),
        ConfValue::List(l) => l.iter().map(|p| p.trim().to_string()).collect(),
        _ => {
            return Err(bad(
                key,
                "expected a path, a list of paths or a comma-separated string",
            ))
        }
    };
    let paths: Vec<PathBuf> = items
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect();
    if paths.is_empty() {
        return Err(bad(key, "no directory given"));
    }
    Ok(paths)
}

impl StorageConfig {
    /// Applies one setting by its BookKeeper key name.
    pub fn set(&mut self, key: &str, v: &ConfValue) -> Result<()> {
        let j = &mut self.journal;
        match key {
            "journalDirectories" | "journalDirectory" => self.journal_dirs = dirs(key, v)?,
            "ledgerDirectories" => self.ledger_dirs = dirs(key, v)?,
            "indexDirectories" => self.index_dirs = dirs(key, v)?,
            "journalMaxGroupWaitMSec" => {
                j.max_group_wait = Duration::from_millis(int(key, v, 0)? as u64)
            }
            "journalBufferedWritesThreshold" => {
                j.buffered_writes_threshold = int(key, v, 0)? as usize
            }
            "journalBufferedEntriesThreshold" => {
                j.buffered_entries_threshold = int(key, v, 0)? as usize
            }
            "journalFlushWhenQueueEmpty" => j.flush_when_queue_empty = boolean(key, v)?,
            "journalSyncData" => j.sync_data = boolean(key, v)?,
            "journalWriteBufferSizeKB" => j.write_buffer_size = int(key, v, 1)? as usize * 1024,
            "journalPreAllocSizeMB" => j.prealloc_size = (int(key, v, 0)? as u64) << 20,
            "journalMaxSizeMB" => j.max_file_size = (int(key, v, 1)? as u64) << 20,
            "journalMaxBackups" => j.max_backups = int(key, v, 0)? as usize,
            "journalQueueSize" => j.queue_size = int(key, v, 1)? as usize,
            "journalPageCacheFlushIntervalMSec" => {
                j.page_cache_flush_interval = Duration::from_millis(int(key, v, 1)? as u64)
            }
            "skipReplayJournalInvalidRecord" => j.skip_replay_invalid_record = boolean(key, v)?,
            "logSizeLimit" => {
                let n = int(key, v, 4096)? as u64;
                if n > MAX_LOG_SIZE_LIMIT {
                    return Err(bad(key, &format!("must be <= {MAX_LOG_SIZE_LIMIT}")));
                }
                self.log_size_limit = n;
            }
            "writeBufferSizeBytes" => self.entry_log_write_buffer = int(key, v, 1)? as usize,
            "flushInterval" => self.flush_interval = Duration::from_millis(int(key, v, 0)? as u64),
            _ => {
                return Err(StorageError::InvalidArgument(format!(
                    "unknown ledger storage configuration key {key:?}"
                )))
            }
        }
        Ok(())
    }

    /// Builds a configuration from `(key, value)` pairs over BookKeeper's defaults.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, ConfValue)>) -> Result<Self> {
        let mut cfg = StorageConfig::default();
        for (k, v) in pairs {
            cfg.set(k, &v)?;
        }
        if cfg.journal.max_group_wait.is_zero() {
            // As in BookKeeper: with no group wait, the only flush trigger left is an empty queue.
            cfg.journal.flush_when_queue_empty = true;
        }
        Ok(cfg)
    }

    /// Where the index log lives: the first index directory, else the first ledger directory.
    pub fn index_dir(&self) -> &PathBuf {
        self.index_dirs.first().unwrap_or(&self.ledger_dirs[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookkeeper_names_and_defaults() {
        let cfg = StorageConfig::from_pairs([
            ("journalDirectories", ConfValue::Str("/a, /b".into())),
            ("ledgerDirectories", ConfValue::List(vec!["/l".into()])),
            ("journalSyncData", ConfValue::Str("false".into())),
            ("logSizeLimit", ConfValue::Int(1 << 20)),
        ])
        .unwrap();
        assert_eq!(
            cfg.journal_dirs,
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert!(!cfg.journal.sync_data);
        assert_eq!(cfg.journal.max_group_wait, Duration::from_millis(2));
        assert_eq!(cfg.journal.buffered_writes_threshold, 512 * 1024);
        assert_eq!(cfg.log_size_limit, 1 << 20);
    }

    #[test]
    fn bad_values_are_rejected_with_the_key_name() {
        let err = StorageConfig::from_pairs([("journalMaxSizeMB", ConfValue::Int(0))]).unwrap_err();
        assert!(err.to_string().contains("journalMaxSizeMB"));
        assert!(StorageConfig::from_pairs([("noSuchKey", ConfValue::Int(1))]).is_err());
        assert!(
            StorageConfig::from_pairs([("journalSyncData", ConfValue::Str("maybe".into()))])
                .is_err()
        );
    }

    #[test]
    fn zero_group_wait_flushes_when_queue_empty() {
        let cfg =
            StorageConfig::from_pairs([("journalMaxGroupWaitMSec", ConfValue::Int(0))]).unwrap();
        assert!(cfg.journal.flush_when_queue_empty);
    }
}
