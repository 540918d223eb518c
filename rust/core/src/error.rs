//! The storage layer's one error type; `lib.rs` maps it to `pybkx.errors` exactly once.
//! Never build error strings on the hot path of a successful operation.

use std::io;

/// Everything the storage engine can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("corrupt data: {0}")]
    Corruption(String),
    #[error("ledger {0} does not exist on this bookie")]
    NoLedger(u64),
    #[error("entry {entry} of ledger {ledger} does not exist on this bookie")]
    NoEntry { ledger: u64, entry: u64 },
    #[error("ledger {0} is fenced")]
    Fenced(u64),
    #[error("master key does not match the key of ledger {0}")]
    Unauthorized(u64),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("directory {0} is in use by another process")]
    Locked(String),
    #[error("ledger storage is closed")]
    Closed,
    #[error("journal queue is full")]
    QueueFull,
}

pub type Result<T> = std::result::Result<T, StorageError>;

/// Adds the operation and path to an `io::Error`, so a failure says where it happened.
pub trait IoContext<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| StorageError::Io {
            context: what(),
            source,
        })
    }
}

impl Clone for StorageError {
    /// Errors fan out to every waiter of a failed journal group, so they must be cloneable;
    /// `io::Error` is not, so the clone keeps its kind and message.
    fn clone(&self) -> Self {
        match self {
            StorageError::Io { context, source } => StorageError::Io {
                context: context.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            StorageError::Corruption(s) => StorageError::Corruption(s.clone()),
            StorageError::NoLedger(l) => StorageError::NoLedger(*l),
            StorageError::NoEntry { ledger, entry } => StorageError::NoEntry {
                ledger: *ledger,
                entry: *entry,
            },
            StorageError::Fenced(l) => StorageError::Fenced(*l),
            StorageError::Unauthorized(l) => StorageError::Unauthorized(*l),
            StorageError::InvalidArgument(s) => StorageError::InvalidArgument(s.clone()),
            StorageError::Locked(s) => StorageError::Locked(s.clone()),
            StorageError::Closed => StorageError::Closed,
            StorageError::QueueFull => StorageError::QueueFull,
        }
    }
}
