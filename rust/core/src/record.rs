//! The framing shared by journal, entry log and index log files: a file header (magic, version)
//! and records `[u32 body_len][u32 crc32c(body)][body]`. It never interprets record bodies.

use std::fs::File;
use std::io::Read;

use crate::error::{IoContext, Result, StorageError};

/// Bytes before a record's body.
pub const RECORD_HEADER_LEN: usize = 8;
/// Size of every file header: magic (8), version (4), header length (4), file id (8), spare (8).
pub const FILE_HEADER_LEN: usize = 32;
/// No record body is larger than this; a larger length field is corruption, not an allocation.
pub const MAX_RECORD_BODY: usize = 256 << 20;

/// Appends one framed record to `out`: header, then the body parts in order.
pub fn append_record(out: &mut impl RecordSink, parts: &[&[u8]]) {
    append_record_with_crc(out, crc_of(parts), parts);
}

/// The CRC32C of the body made of `parts` in order.
pub fn crc_of(parts: &[&[u8]]) -> u32 {
    parts
        .iter()
        .fold(0u32, |crc, p| crc32c::crc32c_append(crc, p))
}

/// Appends one framed record whose body checksum `crc` (of `parts` in order) the caller already
/// knows: the checksum of a large entry is computed once for journal and entry log.
pub fn append_record_with_crc(out: &mut impl RecordSink, crc: u32, parts: &[&[u8]]) {
    debug_assert_eq!(crc, crc_of(parts), "a record's checksum must be its body's");
    let len: usize = parts.iter().map(|p| p.len()).sum();
    out.reserve(RECORD_HEADER_LEN + len);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.extend_from_slice(&crc.to_be_bytes());
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// Where records are appended: a `Vec` or a buffer aligned for direct I/O.
pub trait RecordSink {
    fn reserve(&mut self, additional: usize);
    fn extend_from_slice(&mut self, bytes: &[u8]);
}

impl RecordSink for Vec<u8> {
    fn reserve(&mut self, additional: usize) {
        Vec::reserve(self, additional);
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes);
    }
}

impl RecordSink for crate::aligned::AlignedBuf {
    fn reserve(&mut self, additional: usize) {
        crate::aligned::AlignedBuf::reserve(self, additional);
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        crate::aligned::AlignedBuf::extend_from_slice(self, bytes);
    }
}

/// Builds a file header for `magic` (8 bytes) with `version` and the file's own id.
pub fn file_header(magic: &[u8; 8], version: u32, file_id: u64) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[0..8].copy_from_slice(magic);
    h[8..12].copy_from_slice(&version.to_be_bytes());
    h[12..16].copy_from_slice(&(FILE_HEADER_LEN as u32).to_be_bytes());
    h[16..24].copy_from_slice(&file_id.to_be_bytes());
    h
}

/// Checks a file header; returns the file id stored in it.
pub fn check_file_header(
    header: &[u8],
    magic: &[u8; 8],
    max_version: u32,
    what: &str,
) -> Result<u64> {
    if header.len() < FILE_HEADER_LEN || &header[0..8] != magic {
        return Err(StorageError::Corruption(format!("{what}: bad magic")));
    }
    let version = be_u32(&header[8..12]);
    if version == 0 || version > max_version {
        return Err(StorageError::Corruption(format!(
            "{what}: unsupported format version {version}"
        )));
    }
    Ok(be_u64(&header[16..24]))
}

/// Why a scan of records stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// A zero length field: the end of written data (pre-allocated zeros follow).
    Clean,
    /// The file ended exactly at a record boundary.
    EndOfFile,
    /// The data ends in a partial record or one whose checksum fails: a torn or corrupt tail.
    Torn(String),
}

/// Reads framed records sequentially from a file through a large buffer.
pub struct RecordReader {
    file: File,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// File offset of `buf[start]`.
    offset: u64,
    eof: bool,
    what: String,
}

/// One decoded record: its file offset, its on-disk size and its body.
pub struct Record<'a> {
    pub offset: u64,
    pub size: u64,
    pub body: &'a [u8],
}

impl RecordReader {
    /// Starts reading `file` (already positioned by the caller at `offset`).
    pub fn new(file: File, offset: u64, what: String) -> Self {
        RecordReader {
            file,
            buf: vec![0u8; 1 << 20],
            start: 0,
            end: 0,
            offset,
            eof: false,
            what,
        }
    }

    /// File offset just after the last record returned.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Makes at least `n` bytes available from `start`, unless the file ends first.
    fn fill(&mut self, n: usize) -> Result<bool> {
        while self.end - self.start < n {
            if self.eof {
                return Ok(false);
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() < n {
                self.buf.resize(n.next_power_of_two(), 0);
            }
            let got = self
                .file
                .read(&mut self.buf[self.end..])
                .ctx(|| format!("reading {}", self.what))?;
            if got == 0 {
                self.eof = true;
            }
            self.end += got;
        }
        Ok(true)
    }

    /// The next valid record, or why the valid data ends.
    pub fn next_record(&mut self) -> Result<std::result::Result<Record<'_>, ScanEnd>> {
        if !self.fill(RECORD_HEADER_LEN)? {
            return Ok(Err(if self.end == self.start {
                ScanEnd::EndOfFile
            } else {
                ScanEnd::Torn("partial record header".into())
            }));
        }
        let h = &self.buf[self.start..self.start + RECORD_HEADER_LEN];
        let len = be_u32(&h[0..4]) as usize;
        let crc = be_u32(&h[4..8]);
        if len == 0 {
            return Ok(Err(if crc == 0 {
                ScanEnd::Clean
            } else {
                ScanEnd::Torn("zero-length record with a checksum".into())
            }));
        }
        if len > MAX_RECORD_BODY {
            return Ok(Err(ScanEnd::Torn(format!(
                "record length {len} out of range"
            ))));
        }
        if !self.fill(RECORD_HEADER_LEN + len)? {
            return Ok(Err(ScanEnd::Torn("partial record body".into())));
        }
        let body_start = self.start + RECORD_HEADER_LEN;
        let body = &self.buf[body_start..body_start + len];
        if crc32c::crc32c(body) != crc {
            return Ok(Err(ScanEnd::Torn("record checksum mismatch".into())));
        }
        let offset = self.offset;
        let size = (RECORD_HEADER_LEN + len) as u64;
        self.start = body_start + len;
        self.offset += size;
        Ok(Ok(Record { offset, size, body }))
    }
}

pub fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

pub fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Checks the framing of one record read at a known location (entry log reads).
pub fn verify_record(buf: &[u8], what: impl Fn() -> String) -> Result<&[u8]> {
    if buf.len() < RECORD_HEADER_LEN {
        return Err(StorageError::Corruption(format!(
            "{}: short record",
            what()
        )));
    }
    let len = be_u32(&buf[0..4]) as usize;
    if len != buf.len() - RECORD_HEADER_LEN {
        return Err(StorageError::Corruption(format!(
            "{}: record length {len}, expected {}",
            what(),
            buf.len() - RECORD_HEADER_LEN
        )));
    }
    let body = &buf[RECORD_HEADER_LEN..];
    if crc32c::crc32c(body) != be_u32(&buf[4..8]) {
        return Err(StorageError::Corruption(format!(
            "{}: checksum mismatch",
            what()
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn records_round_trip_and_torn_tail_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut data = Vec::new();
        append_record(&mut data, &[b"hello", b" world"]);
        append_record(&mut data, &[&[7u8; 3000]]);
        let full = data.len();
        append_record(&mut data, &[b"torn"]);
        data.truncate(full + 6);
        File::create(&path).unwrap().write_all(&data).unwrap();

        let mut r = RecordReader::new(File::open(&path).unwrap(), 0, "f".into());
        assert_eq!(r.next_record().unwrap().ok().unwrap().body, b"hello world");
        let rec = r.next_record().unwrap().ok().unwrap();
        assert_eq!(rec.body.len(), 3000);
        assert_eq!(rec.offset, 19);
        assert!(matches!(r.next_record().unwrap(), Err(ScanEnd::Torn(_))));
        assert_eq!(r.offset() as usize, full);
    }

    #[test]
    fn corrupt_body_fails_the_checksum() {
        let mut data = Vec::new();
        append_record(&mut data, &[b"payload"]);
        assert!(verify_record(&data, || "x".into()).is_ok());
        data[10] ^= 1;
        assert!(verify_record(&data, || "x".into()).is_err());
    }

    #[test]
    fn zeros_mean_clean_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut data = Vec::new();
        append_record(&mut data, &[b"a"]);
        data.extend_from_slice(&[0u8; 64]);
        File::create(&path).unwrap().write_all(&data).unwrap();
        let mut r = RecordReader::new(File::open(&path).unwrap(), 0, "f".into());
        assert!(r.next_record().unwrap().is_ok());
        assert_eq!(r.next_record().unwrap().err(), Some(ScanEnd::Clean));
    }
}
